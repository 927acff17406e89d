"""comm_exposed: torch.distributed with the NCCL backend on one rank; each step averages a
1 GiB gradient with all_reduce(AVG) after the compute, nothing overlapping it. (With one rank
NCCL's in-place SUM is a no-op; AVG runs its one-rank reduction kernel.)"""
import json, os, time
import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:" + os.environ["MASTER_PORT"],
                        rank=0, world_size=1, device_id=torch.device("cuda", 0))
dev = "cuda"
w = torch.randn(2048, 2048, device=dev)
a = torch.randn(2048, 2048, device=dev)
grad = torch.randn(256 << 20, device=dev)  # 1 GiB
t0 = time.perf_counter()
for step in range(40):
    b = a
    for _ in range(4):
        b = b @ w
    dist.all_reduce(grad, op=dist.ReduceOp.AVG)
torch.cuda.synchronize()
dist.destroy_process_group()
print(json.dumps({"workload": "nccl_single_rank", "steps": 40, "s": round(time.perf_counter() - t0, 3)}))
