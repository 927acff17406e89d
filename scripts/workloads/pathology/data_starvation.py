"""data_starvation (the suite's first workload, kept by name): DataLoader with num_workers=0 and heavy CPU
transforms in the main process; the GPU waits while the main thread computes. With host samples
this is cpu_bound (main_process_work), not data_starvation: nothing was blocked waiting for input."""
import json, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Heavy(Dataset):
    def __len__(self):
        return 64 * 40

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((3, 96, 96)).astype(np.float32)
        for _ in range(4):  # a costly CPU augmentation
            img = np.sort(img, axis=-1)[:, :, ::-1].copy()
        return torch.from_numpy(img), i % 10


dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(8), torch.nn.Flatten(), torch.nn.Linear(32 * 64, 10)).to(dev)
params = list(model.parameters())
loader = DataLoader(Heavy(), batch_size=64, num_workers=0, shuffle=False)
t0 = time.perf_counter()
steps = 0
for x, y in loader:
    x, y = x.to(dev), y.to(dev)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        torch._foreach_add_(params, grads, alpha=-0.01)
    steps += 1
torch.cuda.synchronize()
print(json.dumps({"workload": "data_starvation", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
