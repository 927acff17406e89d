"""implicit_sync: loss.item() every step, then 1 ms of host-side logging; the GPU drains and
waits for the host each step."""
import json, time
import torch

dev = "cuda"
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(3)]).to(dev)
params = list(model.parameters())
x = torch.randn(256, 4096, device=dev)
y = torch.randn(256, 4096, device=dev)
losses = []
t0 = time.perf_counter()
for step in range(60):
    loss = torch.nn.functional.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        torch._foreach_add_(params, grads, alpha=-1e-4)
    losses.append(loss.item())  # blocks until the GPU has finished the step
    time.sleep(0.001)  # logging / metrics on the host
print(json.dumps({"workload": "implicit_sync", "steps": 60, "s": round(time.perf_counter() - t0, 3)}))
