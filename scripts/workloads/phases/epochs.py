"""Three epochs over a DataLoader whose 4 workers are not persistent, so each epoch starts new
ones; each worker builds a lookup table first (about 0.6 s of CPU). The training step
accumulates gradients over two micro-batches: odd micro-batches run forward and backward,
even ones also run the optimizer, so the steps alternate in shape. Marks: each epoch's loop,
and each epoch boundary (from the last batch of one epoch to the first of the next); "steps"
prints the optimizer steps the script ran."""
import json, time
import torch
from torch.utils.data import DataLoader, Dataset
from marks import mark, note

dev = "cuda"


class Rows(Dataset):
    def __len__(self):
        return 120 * 64

    def __getitem__(self, i):
        return torch.full((1024,), float(i % 7))


def warm_up(_):
    # A worker's own start-up: a table to look rows up in, as tokenizers and indexes do.
    t = time.time()
    table = {}
    while time.time() - t < 0.6:
        table[len(table)] = str(len(table))


with mark("start-up"):
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(6)]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = DataLoader(Rows(), batch_size=64, num_workers=4, persistent_workers=False,
                      worker_init_fn=warm_up)

steps = 0
last_end = None
for epoch in range(3):
    it = iter(data)
    first = next(it)
    if last_end is not None:
        note("epoch-boundary", last_end, time.time_ns())
    a = time.time_ns()
    batch = first
    micro = 0
    while batch is not None:
        loss = model(batch.to(dev, non_blocking=True)).square().mean()
        loss.backward()
        micro += 1
        if micro % 2 == 0:
            opt.step()
            opt.zero_grad(set_to_none=True)
            steps += 1
        batch = next(it, None)
    torch.cuda.synchronize()
    last_end = time.time_ns()
    note("loop", a, last_end)
print(json.dumps({"steps": steps}), flush=True)
