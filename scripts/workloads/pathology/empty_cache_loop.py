"""empty_cache_loop: torch.cuda.empty_cache() every step: the caching allocator frees its blocks
(cudaFree synchronises the device) and allocates them again next step."""
import json, os, time
# Plain segments (cudaMalloc/cudaFree), whatever the installed torch's default is.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False")
import torch

dev = "cuda"
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
t0 = time.perf_counter()
for step in range(150):
    # A batch whose size changes step to step: every step needs segments of new sizes.
    x = torch.randn(512 + 64 * (step % 7), 2048, device=dev)
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    torch.cuda.empty_cache()
torch.cuda.synchronize()
print(json.dumps({"workload": "empty_cache_loop", "steps": 150, "s": round(time.perf_counter() - t0, 3)}))
