"""producer_thread: the loop's batches come from a producer thread of its own through a queue,
and the producer is slow because it waits (a sleep standing for a network or storage fetch),
not because it computes: true starvation through a thread. data_starvation (producer_thread),
never cpu_bound: nothing in the process was computing."""
import json, queue, threading, time
import torch


def producer(q, n):
    for i in range(n):
        time.sleep(0.03)  # a fetch: the producer waits, the GIL is free
        q.put(torch.randn(256, 1024))
    q.put(None)


dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
y = torch.randint(0, 10, (256,), device=dev)
q = queue.Queue(maxsize=2)
t = threading.Thread(target=producer, args=(q, 250), name="producer", daemon=True)
t.start()
t0 = time.perf_counter()
steps = 0
while True:
    xb = q.get()
    if xb is None:
        break
    loss = torch.nn.functional.cross_entropy(model(xb.to(dev)), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    steps += 1
torch.cuda.synchronize()
print(json.dumps({"workload": "producer_thread", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
