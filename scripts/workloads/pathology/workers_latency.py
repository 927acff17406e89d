"""workers_latency: 4 DataLoader workers, each blocking 2 ms per sample inside __getitem__ (a
fetch), batches of 64: each worker waits 128 ms per batch while using little CPU. More workers or
a higher prefetch_factor help: data_starvation (workers_latency_bound), not workers_idle."""
import json, time
import torch
from torch.utils.data import DataLoader, Dataset


class Remote(Dataset):
    def __len__(self):
        return 64 * 80

    def __getitem__(self, i):
        time.sleep(0.002)  # a network or storage fetch: latency, not CPU
        return torch.full((1024,), float(i % 7)), i % 10


if __name__ == "__main__":
    dev = "cuda"
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Remote(), batch_size=64, num_workers=4, persistent_workers=True)
    t0 = time.perf_counter()
    steps = 0
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x.to(dev)), y.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
    torch.cuda.synchronize()
    print(json.dumps({"workload": "workers_latency", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
