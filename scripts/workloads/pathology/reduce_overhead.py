"""torch.compile(mode="reduce-overhead") on an MLP of 12 small layers at batch 32: every
step replays a CUDA graph of a few dozen tiny kernels (over 100 us of GPU work against a
few tens of us of host work per step). The host is far ahead; the idle time lies between
the graph's nodes on the device (kernel_fragmentation, subcause graph_gaps), never
launch_bound, and no fix may advise CUDA graphs. Its compile workers never use CUDA."""
import json, time
import torch

torch.manual_seed(0)
dev = "cuda"
layers = []
for _ in range(12):
    layers += [torch.nn.Linear(1024, 1024), torch.nn.GELU()]
model = torch.nn.Sequential(*layers).to(dev)
step_fn = torch.compile(model, mode="reduce-overhead")
data = torch.randn(64, 32, 1024, device=dev)

with torch.no_grad():
    for i in range(5):  # compile, record the graph
        step_fn(data[i])
    torch.cuda.synchronize()
    steps = 10000
    t0 = time.perf_counter()
    for step in range(steps):
        out = step_fn(data[step % 64])
    torch.cuda.synchronize()
print(json.dumps({"workload": "reduce_overhead", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
