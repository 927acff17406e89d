"""Host-to-device copies from pageable and pinned memory, 20 of each, known sizes."""
import json
import torch

n = 1 << 22  # 16 MiB of float32
pageable = torch.ones(n)
pinned = torch.ones(n).pin_memory()
for _ in range(20):
    a = pageable.to("cuda")
    b = pinned.to("cuda", non_blocking=True)
torch.cuda.synchronize()
print(json.dumps({"workload": "copies", "pageable": 20, "pinned": 20, "bytes_each": n * 4}))
