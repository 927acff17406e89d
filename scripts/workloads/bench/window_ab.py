"""Tracing cost measured inside one process: dormant blocks and trace-window blocks in turn.

Run preloaded and dormant (GPUTRACE_MODE=dormant LD_PRELOAD=libgputrace.so). The process
opens windows on itself through its own control socket (the path `gputrace attach` uses),
so each pair (dormant blocks, then window blocks) shares the process, its allocator state
and the machine's moment: the between-process spread (3-8% on the launch-bound loop) is
out of the ratio. Also shows that windows open and close repeatedly in one process.

    window_ab.py [--workload launch|mlp|resnet50] [--windows 8] [--blocks 20]

Workloads as in bench_workload.py: a block is 2000 launches (us per launch), 10 MLP steps,
3 ResNet-50 steps (us per step) or 32 generated tokens (us per 32 tokens).
Prints one JSON line: per pair the median block time dormant and in the
window, their ratio, the same for the fastest block (ratio_min: interference only adds
time), the trace each window wrote; and the medians of the ratios.
"""
import argparse, json, os, socket, statistics as st, time
import torch
import steps

p = argparse.ArgumentParser()
p.add_argument("--windows", type=int, default=8)
p.add_argument("--blocks", type=int, default=20, help="timed blocks of 2000 launches per half")
p.add_argument("--window-ms", type=int, default=2500)
p.add_argument("--workload", default="launch", choices=["launch", "mlp", "resnet50", "gen"])
a = p.parse_args()
dev = "cuda"
torch.manual_seed(0)

if a.workload == "launch":
    x = torch.zeros(16, device=dev)
    per = 2000

    def step():
        x.add_(1)
elif a.workload == "mlp":
    step, per = steps.mlp(dev), 10
elif a.workload == "gen":
    # One block: 32 tokens generated one by one at batch 1 (us per 32 tokens).
    step, per = steps.gpt_generate(dev, 32), 1
else:
    step, per = steps.resnet50(dev), 3

def block_us():
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(per):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / per


def blocks(n, skip):
    """Median and fastest of n timed blocks, after skip untimed ones."""
    for _ in range(skip):
        block_us()
    t = [block_us() for _ in range(n)]
    return st.median(t), min(t)


def sock_path():
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    d = os.path.join(xdg, "gputrace") if xdg else "/tmp/gputrace-%d" % os.getuid()
    return os.path.join(d, "%d.sock" % os.getpid())


path = sock_path()
for _ in range(100):
    if os.path.exists(path):
        break
    time.sleep(0.05)
out = {"workload": a.workload, "socket": os.path.exists(path), "pairs": []}
blocks(5, 0)  # warm-up
for w in range(a.windows):
    dormant, dormant_min = blocks(a.blocks, 1)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    f = s.makefile("rw")
    f.write("window ms=%d\n" % a.window_ms)
    f.flush()
    started = f.readline().strip()
    t_start = time.perf_counter()
    traced, traced_min = blocks(a.blocks, 3)
    inside_s = time.perf_counter() - t_start
    done = f.readline().strip()
    s.close()
    out["pairs"].append({"dormant_us": dormant, "window_us": traced, "ratio": traced / dormant,
                         "dormant_min_us": dormant_min, "window_min_us": traced_min,
                         "ratio_min": traced_min / dormant_min,
                         "blocks_inside_window_s": round(inside_s, 3),
                         "started": started, "done": done})
r = [q["ratio"] for q in out["pairs"]]
out["median_ratio"] = st.median(r) if r else None
out["min_max_ratio"] = [min(r), max(r)] if r else None
rm = [q["ratio_min"] for q in out["pairs"]]
out["median_ratio_min"] = st.median(rm) if rm else None
out["windows_done"] = sum(1 for q in out["pairs"] if q["done"].startswith("done"))
print(json.dumps(out), flush=True)
