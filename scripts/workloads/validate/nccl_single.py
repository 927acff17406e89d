"""Single-rank NCCL (world_size 1, TCP store on 127.0.0.1): 40 all_reduces of known sizes."""
import json, os
import torch, torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")
dist.init_process_group("nccl", rank=0, world_size=1)
sizes = [1 << 10, 1 << 16, 1 << 20, 1 << 24]
total = 0
for i in range(40):
    n = sizes[i % 4]
    t = torch.ones(n, device="cuda")
    dist.all_reduce(t)
    total += n * 4
torch.cuda.synchronize()
dist.destroy_process_group()
print(json.dumps({"workload": "nccl_single", "all_reduces": 40, "bytes": total}))
