"""loader_exit: a training loop fed by a DataLoader with 4 worker processes, whose
workers end through os._exit (multiprocessing's children do), then a clean exit 0."""
import torch
from torch.utils.data import DataLoader, Dataset


class Rand(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        return torch.randn(3, 64, 64), i % 10


model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 64 * 64, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    for x, y in DataLoader(Rand(), batch_size=32, num_workers=4):
        loss = torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        opt.zero_grad()
        loss.backward()
        opt.step()
torch.cuda.synchronize()
print("loader_exit: done", flush=True)
