"""An unfused optimizer over many small parameters: 400 small layers (LayerNorm + Linear 64x64),
Adam with foreach=False (one small kernel per parameter and operation). --fixed: fused=True."""
import torch
from common import FIXED, timed_loop

dev = "cuda"
blocks = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 64))
                               for _ in range(200)]).to(dev)
opt = (torch.optim.Adam(blocks.parameters(), lr=1e-4, fused=True) if FIXED
       else torch.optim.Adam(blocks.parameters(), lr=1e-4, foreach=False))
x = torch.randn(512, 64, device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    blocks(x).square().mean().backward()
    opt.step()


timed_loop("unfused_optimizer", step, 60)
