"""torch.compile with a batch size that changes (dynamic shapes off): every new size recompiles.
8 sizes, each run 40 steps. A size's compilation is its first call less a repeated call's time;
the marks give compilation and loop time as the script measured them."""
import time
import torch
import torch._dynamo
from marks import mark, note

torch._dynamo.config.automatic_dynamic_shapes = False
torch._dynamo.config.cache_size_limit = 64
dev = "cuda"
with mark("start-up"):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(),
                                torch.nn.Linear(4096, 1024), torch.nn.LayerNorm(1024)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    cmodel = torch.compile(model, dynamic=False)


def step(x):
    opt.zero_grad(set_to_none=True)
    cmodel(x).square().mean().backward()
    opt.step()


for size in range(8):
    x = torch.randn(256 + 64 * size, 1024, device=dev)
    a = time.time_ns()
    step(x)
    torch.cuda.synchronize()
    b = time.time_ns()
    step(x)
    torch.cuda.synchronize()
    c = time.time_ns()
    # The first call compiled, then ran as long as the second.
    note("compilation", a, b - (c - b))
    note("loop", b - (c - b), b)
    with mark("loop"):
        for _ in range(40):
            step(x)
        torch.cuda.synchronize()
