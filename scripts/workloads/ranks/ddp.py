"""A data-parallel training job of N ranks (torchrun): a 6-layer MLP under
DistributedDataParallel, its gradients all-reduced every step. With a GPU per rank the
backend is NCCL (layers of 4096); with fewer GPUs than ranks the ranks share them and the
backend is gloo on CUDA tensors (layers of 1024: gloo reduces on the CPU).

    torchrun --nproc-per-node 2 ddp.py [--steps 80] [--slow-rank R --slow-ms X]
                                       [--hang-rank R --hang-after K]

--slow-rank R --slow-ms X: rank R does X ms of host work (a Python loop) before every step:
the straggler the others wait for at each all-reduce.
--hang-rank R --hang-after K: rank R stops issuing collectives after step K (it sleeps);
the other ranks block in their next all-reduce: a hang across ranks.
Prints one JSON line per rank at the end with its mean step time after 5 warm-up steps."""
import argparse, json, os, time
import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=80)
ap.add_argument("--slow-rank", type=int, default=-1)
ap.add_argument("--slow-ms", type=float, default=0.0)
ap.add_argument("--hang-rank", type=int, default=-1)
ap.add_argument("--hang-after", type=int, default=30)
ap.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
a = ap.parse_args()

rank = int(os.environ["RANK"])
local = int(os.environ["LOCAL_RANK"])
world = int(os.environ["WORLD_SIZE"])
gpus = torch.cuda.device_count()
backend = a.backend if a.backend != "auto" else ("nccl" if gpus >= world else "gloo")
gpu = local % gpus
torch.cuda.set_device(gpu)
if backend == "nccl":
    dist.init_process_group("nccl", device_id=torch.device("cuda", gpu))
else:
    dist.init_process_group("gloo")
width = 4096 if backend == "nccl" else 1024
dev = "cuda"
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
                              for _ in range(6)]).to(dev)
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
x = torch.randn(512, width, device=dev)


def host_work(ms):
    end = time.perf_counter() + ms / 1e3
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


t0 = None
for step in range(a.steps):
    if step == 5:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    if rank == a.hang_rank and step == a.hang_after:
        print(json.dumps({"rank": rank, "hang_at_step": step}), flush=True)
        time.sleep(3600)
    if rank == a.slow_rank:
        host_work(a.slow_ms)
    loss = ddp(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step % 10 == 9:
        loss.item()  # the log line a training loop prints every 10 steps
torch.cuda.synchronize()
mean = (time.perf_counter() - t0) / max(1, a.steps - 5)
dist.barrier()
dist.destroy_process_group()
print(json.dumps({"rank": rank, "backend": backend, "gpu": gpu, "steps": a.steps,
                  "mean_step_ms": round(1e3 * mean, 3)}), flush=True)
