"""Batch-1 inference: a 12-block MLP model answering one request at a time (eval, no_grad):
many tiny launches per request. --fixed: the forward captured once in a CUDA graph and replayed."""
import torch
from common import FIXED, timed_loop

dev = "cuda"
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.LayerNorm(512), torch.nn.Linear(512, 512),
                                                  torch.nn.GELU()) for _ in range(12)]).to(dev).eval()
x = torch.randn(1, 512, device=dev)

if FIXED:
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g), torch.no_grad():
        static_y = model(static_x)

    def step():
        static_x.copy_(x)
        g.replay()
else:
    def step():
        with torch.no_grad():
            model(x)

timed_loop("batch1_inference", step, 800, group=1)
