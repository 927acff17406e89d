"""A job meant to be killed with SIGKILL: a loop of one tiny kernel per iteration that
synchronises every 500 iterations and then writes how many kernels have run so far to
the file named by argv[1] (the page cache keeps it when the process is killed).
The checker compares that count with the kernels the cut-short trace holds."""
import os
import sys
import time

import torch

path = sys.argv[1]
x = torch.zeros(16, device="cuda")
torch.cuda.synchronize()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
i = 0
t0 = time.time()
while True:
    x.add_(1)
    i += 1
    if i % 500 == 0:
        torch.cuda.synchronize()
        line = f"{i} {time.time_ns()}\n".encode()
        os.pwrite(fd, line.ljust(64), 0)
