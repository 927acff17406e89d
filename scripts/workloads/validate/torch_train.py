"""A small PyTorch training loop with known structure, for gputrace's GPU validation.

  python torch_train.py --steps 50                     # plain
  python torch_train.py --steps 50 --profile out.json  # whole run under torch.profiler
  python torch_train.py --steps 60 --profile-window 20:40 --profile out.json
                                                       # torch.profiler for part of the loop
Prints one JSON line: per-step times and, with --profile, what torch.profiler saw.
"""
import argparse, json, time, sys
import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=50)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--workload", default="mlp", choices=["mlp", "launch"])
p.add_argument("--profile", default=None)
p.add_argument("--profile-window", default=None)
a = p.parse_args()

torch.manual_seed(0)
prof = None
if a.profile and not a.profile_window:
    from torch.profiler import profile, ProfilerActivity
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    prof.__enter__()

dev = "cuda"
if a.workload == "mlp":
    model = torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
        torch.nn.Linear(4096, 4096)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(256, 4096, device=dev)
    y = torch.randn(256, 4096, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
else:
    x = torch.zeros(16, device=dev)

    def step():
        for _ in range(1000):
            x.add_(1)

times = []
win = None
if a.profile_window:
    lo, hi = (int(v) for v in a.profile_window.split(":"))
    win = (lo, hi)
for i in range(a.steps):
    if win and i == win[0]:
        from torch.profiler import profile, ProfilerActivity
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
    if win and i == win[1] - 1:
        prof.__exit__(None, None, None)
torch.cuda.synchronize()
if prof is not None and not win:
    prof.__exit__(None, None, None)

out = {"workload": a.workload, "steps": a.steps}
st = sorted(times[a.warmup:])
out["step_us_median"] = st[len(st) // 2] * 1e6
out["step_us_min"] = st[0] * 1e6
if prof is not None:
    prof.export_chrome_trace(a.profile)
    with open(a.profile) as f:
        tr = json.load(f)
    ks = [e for e in tr.get("traceEvents", []) if e.get("cat") == "kernel"]
    out["profiler_kernels"] = len(ks)
    out["profiler_kernel_us"] = sum(float(e.get("dur", 0)) for e in ks)
print(json.dumps(out))
sys.stdout.flush()
