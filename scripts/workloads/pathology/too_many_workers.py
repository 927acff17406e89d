"""too_many_workers: twice as many DataLoader workers as the CPUs the job may use, each doing
heavy CPU augmentation: the CPUs are saturated, the workers wait for a core, the GPU waits for
them. num_workers is not the more the better."""
import json, os, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

# The job may use 4 CPUs (a small container's share); the workers inherit the mask.
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:4])
cpus = len(os.sched_getaffinity(0))


class Augmented(Dataset):
    def __len__(self):
        return 64 * 60

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((3, 128, 128)).astype(np.float32)
        for _ in range(6):
            img = np.sort(img, axis=-1)[:, :, ::-1].copy()
        return torch.from_numpy(img), i % 10


dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(16 * 16, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Augmented(), batch_size=64, num_workers=2 * cpus, pin_memory=True,
                    persistent_workers=True, prefetch_factor=2)
t0 = time.perf_counter()
steps = 0
for x, y in loader:
    x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    steps += 1
torch.cuda.synchronize()
print(json.dumps({"workload": "too_many_workers", "workers": 2 * cpus, "steps": steps,
                  "s": round(time.perf_counter() - t0, 3)}))
