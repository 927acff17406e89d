"""A loop, a 4 s pause with the GPU and the host idle (waiting on something outside), then the
loop again."""
import time
import torch
from marks import mark

dev = "cuda"
with mark("start-up"):
    w = torch.randn(4096, 4096, device=dev)
    x = torch.randn(4096, 4096, device=dev)


def loop():
    with mark("loop"):
        for _ in range(300):
            torch.mm(x, w, out=x)
            x.div_(x.norm())
        torch.cuda.synchronize()


loop()
with mark("pause"):
    time.sleep(4)
loop()
