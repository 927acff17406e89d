"""Small CUDA graphs with host work between replays: each replay is 3 tiny kernels (a few
microseconds of GPU work), and the host spends about 40 us in Python before the next
one, so the GPU waits for the host between replays: launch_bound (the host really is
behind), though the job already replays graphs."""
import json, time
import torch

dev = "cuda"
x = torch.randn(1, 64, device=dev)


def body(x):
    for _ in range(3):
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


def host_work(us):
    # Python work between replays (bookkeeping, logging): a short busy wait.
    t = time.perf_counter()
    while time.perf_counter() - t < us * 1e-6:
        pass


steps = 20000
t0 = time.perf_counter()
for step in range(steps):
    g.replay()
    host_work(40)
torch.cuda.synchronize()
print(json.dumps({"workload": "graph_host_behind", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
