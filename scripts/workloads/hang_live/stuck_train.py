"""A training loop whose GPU gets stuck: STEPS normal steps, then a kernel that spins for
longer than any run lasts (torch.cuda._sleep launches `spin_kernel`), and the host waits for
it in torch.cuda.synchronize(). Used by scripts/gpu-hang-live.sh: `gputrace run
--hang-timeout` must report the hang while this still runs. The lines that matter are
marked LAUNCH and WAIT (the script greps for them)."""

import os

import torch

steps = int(os.environ.get("STEPS", "300"))
x = torch.randn(4096, 4096, device="cuda")
w = torch.randn(4096, 4096, device="cuda")
for _ in range(steps):
    y = torch.relu(x @ w)
    x = y / (y.norm() + 1.0)
torch.cuda.synchronize()
print(f"stuck_train: {steps} steps done; now stuck", flush=True)
torch.cuda._sleep(1 << 62)  # LAUNCH
torch.cuda.synchronize()  # WAIT
print("stuck_train: never here", flush=True)
