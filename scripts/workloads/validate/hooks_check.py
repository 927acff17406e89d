"""Symbol hooks on the real stack: NVTX ranges and marks (PyTorch's own NVTX copy),
pageable and pinned copies both ways, and single-rank NCCL all_reduces of known sizes.
Prints what it did as one JSON line, for comparison with the trace."""
import json
import os

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29512")
torch.cuda.init()
n = 1 << 20  # 4 MiB of float32
pageable = torch.ones(n)
pinned = torch.ones(n).pin_memory()
torch.cuda.nvtx.range_push("copies")
for i in range(10):
    torch.cuda.nvtx.range_push(f"step {i}")
    a = pageable.to("cuda")
    b = pinned.to("cuda", non_blocking=True)
    back = torch.empty(n, pin_memory=True)
    back.copy_(b, non_blocking=True)
    c = a.to("cpu")
    torch.cuda.nvtx.mark("tick")
    torch.cuda.nvtx.range_pop()
torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
r = torch.cuda.nvtx.range_start("nccl")
dist.init_process_group("nccl", rank=0, world_size=1)
sizes = [1 << (10 + 2 * i) for i in range(6)]
for s in sizes:
    t = torch.ones(s, device="cuda")
    dist.all_reduce(t)
torch.cuda.synchronize()
dist.destroy_process_group()
torch.cuda.nvtx.range_end(r)
print(json.dumps({
    "copies_each_kind": 10,
    "copy_bytes": n * 4,
    "nvtx_ranges": 12,
    "nvtx_marks": 10,
    "all_reduce_bytes": [s * 4 for s in sizes],
}))
