"""batch1_training: a small MLP trained with batch size 1 and no data loading at all: Python and
framework overhead between many tiny launches. launch_bound, never data_starvation."""
import json, time
import torch

dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                            torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(1, 64, device=dev)
y = torch.randint(0, 10, (1,), device=dev)
t0 = time.perf_counter()
for step in range(600):
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
torch.cuda.synchronize()
print(json.dumps({"workload": "batch1_training", "steps": 600, "s": round(time.perf_counter() - t0, 3)}))
