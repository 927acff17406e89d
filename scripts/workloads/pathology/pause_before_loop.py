"""pause_before_loop: three warm-up steps, an 8 s pause on the host (a barrier, a checkpoint
load), then the training loop. The steady state is the loop, not the pause."""
import json, time
import torch

dev = "cuda"
a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
c = torch.empty_like(a)


def step():
    for _ in range(20):
        torch.matmul(a, b, out=c)


for _ in range(3):
    step()
torch.cuda.synchronize()
time.sleep(8)
t0 = time.perf_counter()
for _ in range(400):
    step()
torch.cuda.synchronize()
print(json.dumps({"workload": "pause_before_loop", "steps": 400, "s": round(time.perf_counter() - t0, 3)}))
