"""busy_loop: a GPU-bound bf16 loop (20 large matmuls, then a synchronize) that runs
until it is killed. After every step it prints "STEP KERNELS MONO_NS" (kernels launched
so far, CLOCK_MONOTONIC), so what ran before any moment is known after a SIGKILL."""
import os, sys, time
import torch

size = int(os.environ.get("SIZE", "8192"))
a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
torch.cuda.synchronize()
print("ready", time.clock_gettime_ns(time.CLOCK_MONOTONIC), flush=True)
step = 0
while True:
    for _ in range(20):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    step += 1
    sys.stdout.write(f"{step} {step * 20} {time.clock_gettime_ns(time.CLOCK_MONOTONIC)}\n")
    sys.stdout.flush()
