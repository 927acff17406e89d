"""A training loop with an evaluation every 100 steps (evaluate(): 40 batches under no_grad)
and a checkpoint save (torch.save of the model and optimizer, 1 GiB) after every evaluation."""
import os, tempfile
import torch
from marks import mark

dev = "cuda"
with mark("start-up"):
    model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x = torch.randn(512, 4096, device=dev)
    ckpt = os.path.join(tempfile.mkdtemp(), "ckpt.pt")


def evaluate():
    model.eval()
    total = torch.zeros((), device=dev)
    with torch.no_grad():
        for _ in range(40):
            total += model(torch.randn(2048, 4096, device=dev)).square().mean()
    model.train()
    return total.item()


for epoch in range(3):
    with mark("loop"):
        for _ in range(100):
            opt.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            opt.step()
        torch.cuda.synchronize()
    with mark("evaluation"):
        evaluate()
    with mark("checkpoint"):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, ckpt)
os.remove(ckpt)
