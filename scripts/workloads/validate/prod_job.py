"""A training job that runs for a fixed time, for the production-mode check: it logs
every step's start (CLOCK_REALTIME ns, the trace's time base) and duration.

  python prod_job.py SECONDS STEPLOG.jsonl [nvtx]

With `nvtx`, every step is an NVTX range named "step" (for `gputrace attach --steps`).
"""
import json, sys, time
import torch

secs, log = float(sys.argv[1]), sys.argv[2]
nvtx = len(sys.argv) > 3 and sys.argv[3] == "nvtx"
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                        torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
x = torch.randn(256, 4096, device="cuda"); y = torch.randn(256, 4096, device="cuda")
end = time.time() + secs
with open(log, "w") as f:
    print("prod_job: stepping", flush=True)
    while time.time() < end:
        t0 = time.time_ns()
        if nvtx:
            torch.cuda.nvtx.range_push("step")
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        torch.cuda.synchronize()
        if nvtx:
            torch.cuda.nvtx.range_pop()
        f.write(json.dumps({"t": t0, "us": (time.time_ns() - t0) / 1e3}) + "\n")
print("prod_job: done", flush=True)
