"""A CuPy loop: elementwise kernels, a reduction, host copies."""
import json
import numpy as np
import cupy as cp

a = cp.arange(1 << 20, dtype=cp.float32)
for _ in range(100):
    a = a * 1.0001 + 1.0
s = float(a.sum())
h = cp.asnumpy(a)
b = cp.asarray(np.ones(1 << 20, dtype=np.float32))
print(json.dumps({"workload": "cupy", "sum": s, "host": float(h[0]), "b": float(b.sum())}))
