"""torch.compile(mode="reduce-overhead") on a small MLP at batch 32: every step replays a
CUDA graph of a few dozen tiny kernels. The host is far ahead; the idle time lies between
the graph's nodes on the device (kernel_fragmentation, subcause graph_gaps), never
launch_bound, and no fix may advise CUDA graphs. Its compile workers never use CUDA."""
import json, time
import torch

torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.GELU(),
    torch.nn.Linear(512, 512), torch.nn.GELU(),
    torch.nn.Linear(512, 10),
).to(dev)
step_fn = torch.compile(model, mode="reduce-overhead")
data = torch.randn(64, 32, 256, device=dev)

with torch.no_grad():
    for i in range(5):  # compile, record the graph
        step_fn(data[i])
    torch.cuda.synchronize()
    steps = 20000
    t0 = time.perf_counter()
    for step in range(steps):
        out = step_fn(data[step % 64])
    torch.cuda.synchronize()
print(json.dumps({"workload": "reduce_overhead", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
