"""gil_holder: a training loop beside a pure-Python thread (metrics- or logging-like) that holds
the GIL most of the time. The loop's launching threads wait for the GIL, not for input: with the
GIL samples this is cpu_bound (gil_contention) naming the holder and its line."""
import json, threading, time
import torch


def metrics(stop):
    # Pure Python, never a blocking call: holds the GIL but at the switch interval.
    n = 0
    while not stop.is_set():
        n = (n * 31 + 7) % 1000003
    return n


dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 1024, device=dev)
y = torch.randint(0, 10, (256,), device=dev)
stop = threading.Event()
t = threading.Thread(target=metrics, args=(stop,), name="metrics", daemon=True)
t.start()
t0 = time.perf_counter()
steps = 0
while time.perf_counter() - t0 < 8.0:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    steps += 1
torch.cuda.synchronize()
stop.set()
t.join()
print(json.dumps({"workload": "gil_holder", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
