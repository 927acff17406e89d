"""shared_gpu: a GPU-bound training loop (traced) shares its GPU with a second, untraced
process running large matmuls for the middle third of the loop. Expected: env_shared_gpu
as the top finding, with the other process's pid and the loop's kernel slowdown measured
(same kernels inside and outside its activity)."""
import json, os, subprocess, sys, time
import torch

HOG = r"""
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
(a @ b).sum().item()
print("ready", flush=True)
sys.stdin.readline()
t0 = time.perf_counter()
n = 0
while time.perf_counter() - t0 < float(sys.argv[1]):
    for _ in range(8):
        c = a @ b
    torch.cuda.synchronize()
    n += 8
print(n, flush=True)
"""

# The other process must not be traced: no preload, no injection, tracing off.
env = {k: v for k, v in os.environ.items()
       if k not in ("LD_PRELOAD", "CUDA_INJECTION64_PATH") and not k.startswith("GPUTRACE_")}
env["GPUTRACE_MODE"] = "off"
ALONE_S, SHARED_S = 3.0, 3.0
hog = subprocess.Popen([sys.executable, "-c", HOG, str(SHARED_S)], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True, env=env)

dev = "cuda"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                            torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).to(dev)
params = list(model.parameters())
x = torch.randn(512, 2048, device=dev)
y = torch.randn(512, 2048, device=dev)


def step():
    loss = torch.nn.functional.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        torch._foreach_add_(params, grads, alpha=-1e-4)


for _ in range(20):
    step()
torch.cuda.synchronize()
assert hog.stdout.readline().strip() == "ready"
phases = {}
for phase, secs in (("alone", ALONE_S), ("shared", SHARED_S), ("after", ALONE_S)):
    if phase == "shared":
        hog.stdin.write("go\n")
        hog.stdin.flush()
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < secs:
        step()
        n += 1
        if n % 20 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    phases[phase] = round((time.perf_counter() - t0) / n * 1e3, 3)
hog_matmuls = hog.stdout.readline().strip()
hog.wait(timeout=60)
print(json.dumps({"workload": "shared_gpu", "ms_per_step": phases, "other_pid": hog.pid,
                  "other_matmuls": hog_matmuls}))
