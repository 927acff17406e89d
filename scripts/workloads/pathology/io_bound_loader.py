"""io_bound_loader: four DataLoader workers read their samples from files on disk, in small
random blocks that bypass the page cache (O_DIRECT, else dropped from it after each read):
the workers wait on storage, the GPU waits for them."""
import json, mmap, os, random, tempfile, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

BLOCK = 64 << 10
FILE_BYTES = 32 << 20
FILES = 8
# On the disk the script runs from (a tmpfs /tmp would never wait on storage).
root = tempfile.mkdtemp(prefix="gputrace-io-", dir=os.environ.get("IO_DIR", os.getcwd()))
chunk = os.urandom(1 << 20)
paths = []
for k in range(FILES):
    p = os.path.join(root, "shard%d.bin" % k)
    with open(p, "wb") as f:
        for _ in range(FILE_BYTES >> 20):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    paths.append(p)
for p in paths:  # out of the page cache before the first read
    fd = os.open(p, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


class Shards(Dataset):
    def __len__(self):
        return 16 * 60

    def __getitem__(self, i):
        rng = random.Random(i)
        p = paths[i % FILES]
        buf = mmap.mmap(-1, BLOCK)
        try:
            fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
            direct = True
        except OSError:
            fd = os.open(p, os.O_RDONLY)
            direct = False
        out = np.empty(32 * BLOCK, dtype=np.uint8)
        for j in range(32):
            off = rng.randrange(FILE_BYTES // BLOCK) * BLOCK
            n = os.preadv(fd, [buf], off)
            out[j * BLOCK:j * BLOCK + n] = np.frombuffer(buf, dtype=np.uint8, count=n)
            if not direct:
                os.posix_fadvise(fd, off, BLOCK, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        x = torch.from_numpy(out[:3 * 64 * 64].astype(np.float32)).view(3, 64, 64)
        return x, i % 10


dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(16 * 16, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Shards(), batch_size=16, num_workers=4, pin_memory=True, persistent_workers=True)
t0 = time.perf_counter()
steps = 0
for x, y in loader:
    x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    steps += 1
torch.cuda.synchronize()
for p in paths:
    os.remove(p)
os.rmdir(root)
print(json.dumps({"workload": "io_bound_loader", "steps": steps, "s": round(time.perf_counter() - t0, 3)}))
