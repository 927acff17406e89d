"""generation_loop: greedy token-by-token generation with a KV cache (a small GPT-2 shape,
random weights, no download), batch 1: many tiny kernels per token and Python between them.
launch_bound (and host overhead), never a warn-level data_starvation."""
import json, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel

dev = "cuda"
torch.manual_seed(0)
cfg = GPT2Config(n_layer=6, n_head=8, n_embd=512, vocab_size=8192, n_positions=1024)
model = GPT2LMHeadModel(cfg).to(dev).eval()
ids = torch.randint(0, cfg.vocab_size, (1, 16), device=dev)
t0 = time.perf_counter()
with torch.no_grad():
    for _ in range(3):
        past = None
        tok = ids
        for _ in range(128):
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            past = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
torch.cuda.synchronize()
print(json.dumps({"workload": "generation_loop", "tokens": 384, "s": round(time.perf_counter() - t0, 3)}))
