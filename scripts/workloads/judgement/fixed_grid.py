"""A fixed-grid custom kernel: a Triton kernel that scales a 64M-element vector with a grid of
4 programs, each looping over its quarter; the GPU has 132 SMs. --fixed: one program per block."""
import torch
import triton
import triton.language as tl
from common import FIXED, timed_loop

dev = "cuda"
n = 1 << 26
x = torch.randn(n, device=dev)
y = torch.empty_like(x)
BLOCK = 1024


@triton.jit
def scale(x_ptr, y_ptr, n, per_program, BLOCK: tl.constexpr):
    start = tl.program_id(0) * per_program
    for i in range(0, per_program, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def step():
    if FIXED:
        scale[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK, BLOCK=BLOCK)
    else:
        scale[(4,)](x, y, n, n // 4, BLOCK=BLOCK)


timed_loop("fixed_grid", step, 30, warmup=3, group=5)
