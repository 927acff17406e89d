"""matmul_bf16: a loop of large bf16 matmuls (8192 x 8192), tensor-pipe bound: the
counterexample to memory_bound. SECONDS_LOOP sets the loop's length (default 3)."""
import json, os, time
import torch

secs = float(os.environ.get("SECONDS_LOOP", "3"))
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
c = a @ b
torch.cuda.synchronize()
t0 = time.perf_counter()
n = 0
while time.perf_counter() - t0 < secs:
    for _ in range(10):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    n += 10
s = time.perf_counter() - t0
print(json.dumps({"workload": "matmul_bf16", "steps": n, "s": round(s, 3),
                  "tflops": round(2 * 8192**3 * n / s / 1e12, 1)}))
