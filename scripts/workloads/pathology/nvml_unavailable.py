"""nvml_unavailable: a short loop of bf16 matmuls traced while NVML cannot be loaded:
expect.json gives `gputrace run` GPUTRACE_NVML=/nonexistent/libnvidia-ml.so.1 (the
documented "a path: that library" form), so the command's sampler fails to load it and its
environment file's `nvml` fact says why. Nothing of the GPU's settings is touched.
Expected: env_nvml_unavailable (always info). SECONDS_LOOP sets the loop's length
(default 2)."""
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
    torch.cuda.synchronize()
    n += 10
print(json.dumps({"workload": "nvml_unavailable", "steps": n, "s": round(time.perf_counter() - t0, 3),
                  "GPUTRACE_NVML": os.environ.get("GPUTRACE_NVML")}))
