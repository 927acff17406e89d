"""small_grid: long kernels that launch 2 blocks on a 132-SM GPU (a Triton reduction with a
grid of 2; torch.cumsum over 2 long rows if Triton is missing)."""
import json, time
import torch

dev = "cuda"
x = torch.randn(2, 1 << 26, device=dev)
out = torch.empty(2, device=dev)
try:
    import triton
    import triton.language as tl

    @triton.jit
    def row_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in range(0, n, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + row, tl.sum(acc, axis=0))

    def step():
        row_sum[(2,)](x, out, x.shape[1], BLOCK=1024)
except ImportError:
    def step():
        torch.cumsum(x, dim=1, out=x)

step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(40):
    step()
torch.cuda.synchronize()
print(json.dumps({"workload": "small_grid", "steps": 40, "s": round(time.perf_counter() - t0, 3)}))
