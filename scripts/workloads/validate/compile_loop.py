"""torch.compile (default mode, no CUDA graphs) on a small MLP: its fused Triton kernels
are launched through the driver API (cuLaunchKernel) every step, beside cuBLAS's through
the runtime. Runs about 8 s of steps."""
import json, time
import torch

torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024),
                            torch.nn.Linear(1024, 1024), torch.nn.GELU()).to(dev)
f = torch.compile(model)
x = torch.randn(64, 1024, device=dev)
with torch.no_grad():
    for _ in range(3):
        f(x)
    torch.cuda.synchronize()
    t0, steps = time.perf_counter(), 0
    while time.perf_counter() - t0 < 8.0:
        y = f(x)
        steps += 1
    torch.cuda.synchronize()
print(json.dumps({"workload": "compile_loop", "steps": steps, "checksum": float(y.sum())}))
