"""sync_memcpy: pinned batches copied without non_blocking=True, so the host waits for the
GPU to drain before it can prepare the next step (3 ms of host work per step)."""
import json, time
import torch

dev = "cuda"
host = torch.randn(8 << 20).pin_memory()  # 32 MiB, pinned
w = torch.randn(4096, 4096, device=dev)
t0 = time.perf_counter()
for step in range(60):
    x = host.to(dev)  # pinned, but blocking: cudaMemcpyAsync + cudaStreamSynchronize
    time.sleep(0.003)  # host-side work (augmentation, bookkeeping) after the copy
    a = x[: 4096 * 2048].view(2048, 4096)
    for _ in range(8):
        a = (a @ w).tanh_()
torch.cuda.synchronize()
print(json.dumps({"workload": "sync_memcpy", "steps": 60, "s": round(time.perf_counter() - t0, 3)}))
