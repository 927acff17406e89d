"""no_host_api: a short loop of bf16 matmuls and a small copy back each round, traced with
the host side of API calls off (expect.json: GPUTRACE_API=0, which turns the driver-API
callbacks off too): the trace has CUPTI's GPU records but no API events. Expected:
env_no_host_api (always info). SECONDS_LOOP sets the loop's length (default 2)."""
import json, os, time
import torch

secs = float(os.environ.get("SECONDS_LOOP", "2"))
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
c = a @ b
torch.cuda.synchronize()
t0 = time.perf_counter()
n = 0
while time.perf_counter() - t0 < secs:
    for _ in range(10):
        torch.matmul(a, b, out=c)
    c[0, :8].float().cpu()  # a copy and a sync every round
    n += 10
torch.cuda.synchronize()
print(json.dumps({"workload": "no_host_api", "steps": n, "s": round(time.perf_counter() - t0, 3)}))
