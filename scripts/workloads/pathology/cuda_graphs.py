"""The launch-bound loop of launch_bound.py captured in a CUDA graph: no launch cost left,
only the device-side gaps between tiny kernels (kernel_fragmentation).

launch_bound may also be raised, and rightly: on an H100 with driver 580 one cudaGraphLaunch of
this 200-node graph took 249.8 us on the host (run 23), longer than the replay's 222.5 us of GPU
time, so the GPU waits for the next replay. The report then says so with graph-aware advice (more
work per replay), never "use CUDA graphs"."""
import json, time
import torch

dev = "cuda"
x = torch.randn(1, 64, device=dev)


def body(x):
    for _ in range(100):
        x = x * 0.999 + 0.001
    return x


s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):  # warm up outside the capture
    body(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = body(x)
t0 = time.perf_counter()
for step in range(200):
    g.replay()
torch.cuda.synchronize()
print(json.dumps({"workload": "cuda_graphs", "steps": 200, "s": round(time.perf_counter() - t0, 3)}))
