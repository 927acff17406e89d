#!/usr/bin/env python3
"""docs/gallery.md: every bundled real trace (examples/) with what it is, the machine it
was recorded on, and what the report says of it (its verdict and top findings), from
`gputrace report --json`. The page is generated: `--check` fails when it differs from what
the current analyzer says, so the gallery's reports are golden outputs checked by the
test command.

    scripts/gallery.py [GPUTRACE]            rewrite docs/gallery.md
    scripts/gallery.py --check [GPUTRACE]    compare (the test command)
    scripts/gallery.py --html DIR [GPUTRACE] every example's HTML report in DIR, with an
                                             index.html linking them (open it in a browser)
"""
import difflib
import html
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "gallery.md")

# What each example shows, in a line; an example missing here fails --check.
ABOUT = {
    "train": "The main job: a small image classifier trained as many scripts do it (two DataLoader workers that cannot keep up, pageable copies, the loss read every step).",
    "data_starvation.gtrace": "A loop waiting for its next batch from the main process.",
    "workers_saturated": "DataLoader workers each busy a whole CPU: too few of them.",
    "pageable_memcpy.gtrace": "Host-to-device copies from ordinary (pageable) memory.",
    "implicit_sync": "A loss read back with .item() every step: the host waits for the GPU.",
    "lazy_import": "A NaN check (.item()) after each of 16 layers, and a first step that imports modules for 5.7 s.",
    "generation_loop_cold": "Token-by-token generation: thousands of tiny kernels, launch-bound.",
    "recompile": "torch.compile with 8 batch sizes (dynamic shapes off), 40 steps each: every new size compiles a forward and a backward graph.",
    "eval_ckpt": "A training loop with an evaluation every 100 steps and a 1 GiB checkpoint save after each (scripts/workloads/phases/eval_ckpt.py; its own phase marks in marks.jsonl).",
    "pause": "A loop, a 4 s pause with the GPU and the host idle, the loop again (scripts/workloads/phases/pause.py; marks.jsonl).",
    "jax_rejit": "A jitted JAX step called with 8 shapes: each new shape traces and compiles again, then 40 steps of 75 us (scripts/workloads/phases/jax_rejit.py; marks.jsonl).",
    "shared_gpu": "Another process computing on the same GPU.",
    "stuck": "A kernel that never ends: the hang report.",
    "oom": "A job that dies of CUDA out-of-memory, its memory growing every step.",
    "sigkill": "A busy job SIGKILLed after 5 s: what the periodic handover kept.",
    "nccl_single_rank.gtrace": "One NCCL rank whose all-reduce is never overlapped with compute.",
    "jax-loop.gtrace": "A JAX training loop, traced with no change to its code.",
    "torch-mlp.gtrace": "A small PyTorch MLP training loop.",
    "torch-mlp-hooks.gtrace": "The same loop recorded by the symbol hooks alone (no CUPTI callbacks).",
    "healthy.gtrace": "A GPU-bound loop: nothing to fix.",
    "ranks_straggler": "torchrun, 4 DDP ranks sharing one GPU with gloo; rank 1 does 15 ms of host work before every step: the straggler, named from when each rank's gradients reached host memory.",
    "ranks_hang": "The same job, rank 1 sleeping after step 30: the other three wait in the all-reduce for a minute, until interrupted.",
    "memory_bound": "Elementwise kernels on a 2 GiB tensor: the GPU busy, its DRAM at 85% of peak, its math idle (NVML GPM).",
    "gil_holder": "A pure-Python metrics thread holding the GIL while the training loop waits for it.",
    "graph_train_step": "A whole training step captured in a CUDA graph and replayed: tiny kernels at batch 32.",
    "epochs": "Three epochs whose 4 DataLoader workers start anew each time (persistent_workers=False), steps alternating in shape (gradient accumulation over 2 micro-batches).",
    "attach_window": "A 3 s window taken by `gputrace attach` from a job started without the library.",
    "small_grid": "A Triton reduction launched with a grid of 2 on a 132-SM H100: the GPU is 100% busy and almost all of it empty (recorded on an H100).",
    "sync_memcpy": "Pinned batches copied without non_blocking=True: the host waits for each copy, then the GPU waits for the host (recorded on an H100).",
    "empty_cache_loop": "torch.cuda.empty_cache() every step: the caching allocator gives memory back and takes it again, each time draining the GPU's queue (recorded on an H100).",
    "env_dropped_records": "A launch-bound loop traced with a 1 MiB CUPTI buffer pool and its trace writer starved of CPU for 1.5 s: 76% of the records lost, and the verdict says so before anything else.",
    "env_nvml_unavailable": "A GPU-bound loop with GPUTRACE_NVML naming a library that is not there: no clocks, power or GPM, and the report says what it could not measure.",
    "env_no_host_api": "A GPU-bound loop traced with GPUTRACE_API=0 (no host API callbacks): idle causes from GPU-only heuristics, labelled as such.",
    "io_bound_loader": "Four DataLoader workers reading small random blocks past the page cache: they sit in disk waits and the GPU waits for them (recorded on an H100).",
}


def entries():
    ex = os.path.join(ROOT, "examples")
    return sorted(e for e in os.listdir(ex) if not e.startswith("diff-") and not e.endswith(".md"))


def short(arg):
    """A script's path from its `scripts/` folder on (the machine's checkout left out)."""
    i = arg.find("/scripts/")
    return arg[i + 1:] if i >= 0 else arg


def render(gt):
    out = [
        "# Gallery: the bundled real traces",
        "",
        "Every trace under `examples/` was recorded on a real GPU by a program of",
        "`scripts/workloads/` (its command line is in the trace). What the report says of",
        "each is below; this page is generated by `scripts/gallery.py` and the test command",
        "checks it against the current analyzer, so these are golden outputs. See any of them",
        "as a page with `gputrace report --html page.html examples/NAME`, or all of them with",
        "`scripts/gallery.py --html DIR` (an index and a page each; about 9 MB, so made, not kept).",
        "",
    ]
    missing = []
    for e in entries():
        path = os.path.join(ROOT, "examples", e)
        r = subprocess.run([gt, "report", "--json", path], capture_output=True, text=True)
        try:
            doc = json.loads(r.stdout)
        except json.JSONDecodeError:
            doc = {"verdict": f"(no report: exit {r.returncode})", "processes": [], "findings": []}
        if e not in ABOUT:
            missing.append(e)
        procs = [p for p in doc.get("processes", []) if p.get("devices")] or doc.get("processes", [])
        p = procs[0] if procs else {}
        gpu = ", ".join(d.get("name", "?") for d in p.get("devices", [])) or "no GPU work"
        cmd = " ".join(os.path.basename(c) if i == 0 else short(c) for i, c in enumerate(p.get("command", [])))
        ended = (p.get("ended") or {}).get("detail", "?")
        out += [f"## `{e}`", "", ABOUT.get(e, "(not described)"), ""]
        out.append(f"- recorded: `{cmd}` on {gpu}, {len(doc.get('processes', []))} process trace(s), ended: {ended}")
        out.append(f"- verdict: {doc.get('verdict', '')}")
        for i, f in enumerate(doc.get("findings", [])[:3]):
            follows = f" (follows from {f['caused_by']})" if f.get("caused_by") else ""
            out.append(f"- finding {i + 1}: {f['severity']} `{f['id']}` {f['at_stake_pct']:.1f}%{follows}: {f['title']}")
        out.append("")
    return "\n".join(out), missing


def pages(gt, out_dir):
    """Each example's `report --html` page in out_dir, and an index linking them."""
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    for e in entries():
        name = e.removesuffix(".gtrace")
        page = os.path.join(out_dir, name + ".html")
        path = os.path.join(ROOT, "examples", e)
        r = subprocess.run([gt, "report", "--html", page, path], capture_output=True, text=True)
        v = subprocess.run([gt, "report", "--json", path], capture_output=True, text=True)
        try:
            verdict = json.loads(v.stdout).get("verdict", "")
        except json.JSONDecodeError:
            verdict = f"(no report: exit {v.returncode})"
        link = (f'<a href="{html.escape(name)}.html">{html.escape(e)}</a>'
                if r.returncode == 0 and os.path.exists(page) else html.escape(e) + " (no page)")
        rows.append(f"<tr><td>{link}</td><td>{html.escape(ABOUT.get(e, ''))}</td>"
                    f"<td>{html.escape(verdict)}</td></tr>")
    index = ("<!doctype html><meta charset=utf-8><title>gputrace gallery</title>"
             "<style>body{font:14px sans-serif;margin:2em}td{vertical-align:top;padding:4px 8px;"
             "border-bottom:1px solid #ddd}</style><h1>The bundled real traces</h1>"
             "<table><tr><th>example</th><th>what it is</th><th>verdict</th></tr>"
             + "".join(rows) + "</table>")
    with open(os.path.join(out_dir, "index.html"), "w", encoding="utf-8") as f:
        f.write(index)
    print(f"gallery: {len(rows)} pages and index.html in {out_dir}")
    return 0


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    if args and args[0] == "--html":
        if len(args) < 2:
            print("gallery: --html needs a directory", file=sys.stderr)
            return 2
        gt = os.path.abspath(args[2]) if len(args) > 2 else os.path.join(ROOT, "target/debug/gputrace")
        return pages(gt, args[1])
    gt = os.path.abspath(args[0]) if args else os.path.join(ROOT, "target/debug/gputrace")
    text, missing = render(gt)
    if missing:
        print(f"gallery: examples with no line in scripts/gallery.py ABOUT: {', '.join(missing)}", file=sys.stderr)
        return 1
    if check:
        old = open(PAGE, encoding="utf-8").read() if os.path.exists(PAGE) else ""
        if old != text:
            sys.stderr.writelines(difflib.unified_diff(
                old.splitlines(True), text.splitlines(True), "docs/gallery.md", "now"))
            print("gallery: docs/gallery.md differs from what the analyzer says now; "
                  "scripts/gallery.py rewrites it (state why in the commit)", file=sys.stderr)
            return 1
        print(f"gallery: {len(entries())} examples, docs/gallery.md up to date")
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"gallery: wrote docs/gallery.md ({len(entries())} examples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
