"""blind_window: a GPU-bound training step (bf16 MLP, plain SGD) run for PHASE_S seconds
(default 1.5), then for PROFILED_S seconds (default 3) under torch.profiler (CPU + CUDA: the
program's own CUPTI use), then PHASE_S again without it. Kineto subscribes to CUPTI at the
end of the profiler's start: gputrace steps aside (CUDA < 13.3 allows one CUPTI subscriber;
the trace records a blind window) and takes CUPTI back when the profiler stops (measured on
an H100: the blind window was the profiled phase to within 50 ms). The profiler's first start
takes about 4 s (imports, Kineto's start) with the GPU idle but not blind; the same step
runs before and after, so the steady state spans it all. Expected: env_blind_window (warn
once the blind window is 20% of the steady state: about 3 s of 10.5 s here). Prints the
phases' CLOCK_REALTIME edges (`marks_ns`, the trace's time base); PROFILER_COUNT=1 also
counts the kernels torch.profiler saw (seconds of its post-processing at the end).
Do not warm the profiler up in start-up: even a CPU-only session subscribes to CUPTI and
switches its time base for the rest of the process."""
import json, os, time
import torch
from torch.profiler import profile, ProfilerActivity

PHASE_S = float(os.environ.get("PHASE_S", "1.5"))
PROFILED_S = float(os.environ.get("PROFILED_S", "3"))
dev, dt = "cuda", torch.bfloat16
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                            torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).to(dev, dt)
params = list(model.parameters())
x = torch.randn(8192, 4096, device=dev, dtype=dt)
y = torch.randn(8192, 4096, device=dev, dtype=dt)


def step():
    loss = torch.nn.functional.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        torch._foreach_add_(params, grads, alpha=-1e-4)


def run_for(secs):
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < secs:
        step()
        n += 1
        if n % 10 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return {"steps": n, "ms_per_step": round((time.perf_counter() - t0) / n * 1e3, 3)}


for _ in range(5):
    step()
torch.cuda.synchronize()
marks = {}  # CLOCK_REALTIME ns (the trace's time base) at each phase edge


def mark(name):
    marks[name] = time.time_ns()


out = {"workload": "blind_window"}
mark("before")
out["before"] = run_for(PHASE_S)
mark("profiler_enter")
prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
prof.__enter__()
mark("profiled")
out["profiled"] = run_for(PROFILED_S)
mark("profiler_exit")
prof.__exit__(None, None, None)
mark("after")
out["after"] = run_for(PHASE_S)
mark("end")
if os.environ.get("PROFILER_COUNT", "0") == "1":  # what torch.profiler saw (seconds of post-processing)
    out["profiler_kernels"] = sum(1 for e in prof.events()
                                  if e.device_type == torch.autograd.DeviceType.CUDA)
out["marks_ns"] = marks
out["phase_s"] = {k: round((marks[b] - marks[a]) / 1e9, 3) for k, a, b in (
    ("before", "before", "profiler_enter"), ("profiler_enter", "profiler_enter", "profiled"),
    ("profiled", "profiled", "profiler_exit"), ("profiler_exit", "profiler_exit", "after"),
    ("after", "after", "end"))}
print(json.dumps(out))
