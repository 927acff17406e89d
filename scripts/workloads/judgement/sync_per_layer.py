"""A sync per layer: a 16-layer MLP trained with a NaN check (.item()) after every layer, so
the host waits for the GPU 16 times a step. --fixed: one check per step, on the loss."""
import torch
from common import FIXED, timed_loop

dev = "cuda"
layers = [torch.nn.Linear(2048, 2048).to(dev) for _ in range(16)]
params = [p for l in layers for p in l.parameters()]
opt = torch.optim.SGD(params, lr=1e-4)
x = torch.randn(128, 2048, device=dev)


def step():
    h = x
    for l in layers:
        h = torch.relu(l(h))
        if not FIXED and torch.isnan(h).any().item():  # the host waits here, every layer
            raise RuntimeError("nan")
    loss = h.square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if FIXED and torch.isnan(loss).item():
        raise RuntimeError("nan")


timed_loop("sync_per_layer", step, 150)
