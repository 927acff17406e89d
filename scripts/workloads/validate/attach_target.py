"""A training loop started without gputrace, for `gputrace attach` to load the library
into (scripts/gpu/attach.sh).

    attach_target.py LOG SECONDS [torch|jax]

LOG gets one line per event, flushed at once:
  "ready"                          warmed up; the loop runs
  "profiling"                      torch.profiler is running (a second CUPTI user), once
                                   LOG.profile exists (the driver makes it; torch only)
  "profiler KERNELS STEPS"         what torch.profiler counted over its steps (torch)
  "step I START_NS END_NS"         each step, CLOCK_REALTIME ns (the trace's clock)
Every step ends with a device synchronisation, so steps do not overlap on the GPU.
"""
import sys, time

log = open(sys.argv[1], "a", buffering=1)
seconds = float(sys.argv[2])
kind = sys.argv[3] if len(sys.argv) > 3 else "torch"

import os
trigger = sys.argv[1] + ".profile"   # the driver touches it to ask for a profiler pass

if kind == "torch":
    import torch
    sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/workloads/bench")
    from steps import mlp
    dev = torch.device("cuda")
    step = mlp(dev)
    sync = torch.cuda.synchronize

    def profiler_pass():
        import json, tempfile
        from torch.profiler import profile, ProfilerActivity
        log.write("profiling\n")
        n = 30
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                step()
            sync()
            time.sleep(3.0)  # a window asked meanwhile meets a CUPTI that is taken
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            prof.export_chrome_trace(f.name)
            ev = json.load(open(f.name)).get("traceEvents", [])
        kern = [e for e in ev if e.get("cat") == "kernel"]
        log.write(f"profiler {len(kern)} {n}\n")
else:
    import jax, jax.numpy as jnp

    @jax.jit
    def f(w, x):
        return jnp.tanh(x @ w) @ w.T

    k = jax.random.PRNGKey(0)
    w = jax.random.normal(k, (2048, 2048))
    state = {"x": jax.random.normal(k, (512, 2048))}

    def step():
        for _ in range(20):
            state["x"] = f(w, state["x"]) / 64.0
    def sync():
        state["x"].block_until_ready()
    profiler_pass = None

for _ in range(20):
    step()
sync()
log.write("ready\n")
t_end = time.time() + seconds
i = 0
while time.time() < t_end:
    if profiler_pass and os.path.exists(trigger):
        os.unlink(trigger)
        profiler_pass()
    t0 = time.time_ns()
    step()
    sync()
    log.write(f"step {i} {t0} {time.time_ns()}\n")
    i += 1
print(f"{kind} target done after {i} steps")
