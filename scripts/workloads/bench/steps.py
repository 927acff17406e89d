"""Training steps of the overhead benchmarks (bench_workload.py, window_ab.py): each
function builds its model and data on `dev` and returns the step as a callable."""
import torch


def mlp(dev):
    """3 x Linear 4096 with ReLU, AdamW, batch 256."""
    m = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096),
                            torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    xb = torch.randn(256, 4096, device=dev)
    yb = torch.randn(256, 4096, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(m(xb), yb).backward()
        opt.step()
    return step


def resnet50(dev):
    """torchvision ResNet-50, SGD with momentum, batch 64, bf16 autocast."""
    import torchvision
    r = torchvision.models.resnet50().to(dev)
    opt = torch.optim.SGD(r.parameters(), lr=0.01, momentum=0.9)
    xi = torch.randn(64, 3, 224, 224, device=dev)
    yi = torch.randint(0, 1000, (64,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(r(xi), yi)
        loss.backward()
        opt.step()
    return step


def gpt_generate(dev, tokens=64):
    """Token-by-token generation at batch 1 with a small GPT-like decoder built here
    (6 layers, width 512, 8 heads, vocabulary 8192; random weights, nothing
    downloaded), greedy, a KV cache, bf16: the common inference pattern. The step
    generates `tokens` tokens from a 16-token prompt; per token, about a hundred small
    kernels launched one at a time."""
    L, D, H, V = 6, 512, 8, 8192
    hd = D // H
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = torch.nn.LayerNorm(D)
            self.qkv = torch.nn.Linear(D, 3 * D)
            self.proj = torch.nn.Linear(D, D)
            self.ln2 = torch.nn.LayerNorm(D)
            self.fc = torch.nn.Linear(D, 4 * D)
            self.out = torch.nn.Linear(4 * D, D)

        def forward(self, x, cache):
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
            shape = lambda t: t.view(1, -1, H, hd).transpose(1, 2)
            q, k, v = shape(q), shape(k), shape(v)
            if cache:
                k = torch.cat([cache[0], k], dim=2)
                v = torch.cat([cache[1], v], dim=2)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=not cache)
            x = x + self.proj(a.transpose(1, 2).reshape(1, -1, D))
            x = x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))
            return x, (k, v)

    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(V, D)
            self.pos = torch.nn.Embedding(1024, D)
            self.blocks = torch.nn.ModuleList(Block() for _ in range(L))
            self.ln = torch.nn.LayerNorm(D)
            self.head = torch.nn.Linear(D, V, bias=False)

        def forward(self, ids, start, caches):
            pos = torch.arange(start, start + ids.shape[1], device=ids.device)
            x = self.emb(ids) + self.pos(pos)
            new = []
            for b, c in zip(self.blocks, caches):
                x, c = b(x, c)
                new.append(c)
            return self.head(self.ln(x[:, -1:])), new

    m = GPT().to(dev).to(torch.bfloat16).eval()
    prompt = torch.randint(0, V, (1, 16), device=dev)

    @torch.inference_mode()
    def step():
        logits, caches = m(prompt, 0, [None] * L)
        n = prompt.shape[1]
        for i in range(tokens):
            nxt = logits.argmax(-1)
            logits, caches = m(nxt, n + i, caches)
    return step


def loader_train(dev, batches=20):
    """A DataLoader training loop: a map-style dataset that makes each 3x64x64 sample on
    the CPU, 2 workers, pinned memory, non_blocking copies, a small CNN with AdamW. The
    step is `batches` batches of 64 (the loader is made once and restarted per step)."""
    import torch.utils.data as tud

    class Synthetic(tud.Dataset):
        def __len__(self):
            return 64 * batches

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.randn(3, 64, 64, generator=g), i % 10

    dl = tud.DataLoader(Synthetic(), batch_size=64, num_workers=2, pin_memory=True,
                        persistent_workers=True)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(64, 10)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)

    def step():
        for x, y in dl:
            x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
    return step
