"""A training step captured whole in a torch.cuda.CUDAGraph (forward, backward, optimizer)
and replayed every step: a small MLP at batch 32, so each replay is a few dozen tiny
kernels and the device-side gaps between the graph's nodes are what is left
(kernel_fragmentation, subcause graph_gaps; the host is far ahead, never launch_bound)."""
import json, time
import torch

torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 512), torch.nn.ReLU(),
    torch.nn.Linear(512, 10),
).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=True)
loss_fn = torch.nn.CrossEntropyLoss()
data = torch.randn(64, 32, 256, device=dev)
labels = torch.randint(0, 10, (64, 32), device=dev)
static_x = data[0].clone()
static_y = labels[0].clone()

# Warm up on a side stream (the optimizer's state is made here), then capture.
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss_fn(model(static_x), static_y).backward()
        opt.step()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    static_loss = loss_fn(model(static_x), static_y)
    static_loss.backward()
    opt.step()

steps = 3000
t0 = time.perf_counter()
for step in range(steps):
    static_x.copy_(data[step % 64])
    static_y.copy_(labels[step % 64])
    g.replay()
torch.cuda.synchronize()
print(json.dumps({"workload": "graph_train_step", "steps": steps, "loss": round(static_loss.item(), 4),
                  "s": round(time.perf_counter() - t0, 3)}))
