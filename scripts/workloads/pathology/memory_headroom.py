"""memory_headroom: an MLP trained with batch size 8: tiny kernels, most device memory free."""
import json, time
import torch

dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 10)).to(dev)
params = list(model.parameters())
x = torch.randn(8, 1024, device=dev)
y = torch.randint(0, 10, (8,), device=dev)
t0 = time.perf_counter()
for step in range(400):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        torch._foreach_add_(params, grads, alpha=-0.01)
torch.cuda.synchronize()
print(json.dumps({"workload": "memory_headroom", "steps": 400, "s": round(time.perf_counter() - t0, 3)}))
