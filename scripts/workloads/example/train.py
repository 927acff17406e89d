"""The bundled example: a small image classifier trained as many scripts do it. Two DataLoader
workers augment on the CPU, batches are copied from pageable memory, and the loss is read back
every step for logging. Recorded on the GPU machine into examples/train/ (scripts/gpu-example.sh)."""
import json
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __len__(self):
        return 64 * 120

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((3, 112, 112)).astype(np.float32)
        for _ in range(3):  # a CPU augmentation
            img = np.sort(img, axis=-1)[:, :, ::-1].copy()
        return torch.from_numpy(img), i % 10


def train_step(model, opt, x, y):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def main():
    dev = "cuda"
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(64 * 16, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Augmented(), batch_size=64, num_workers=2, persistent_workers=True)
    losses = []
    t0 = time.perf_counter()
    for x, y in loader:
        x, y = x.to(dev), y.to(dev)
        loss = train_step(model, opt, x, y)
        losses.append(loss.item())  # logged every step
    print(json.dumps({"workload": "train", "steps": len(losses), "s": round(time.perf_counter() - t0, 3)}))


if __name__ == "__main__":
    main()
