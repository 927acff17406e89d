"""Reads the sampler counters of `gputrace export` of a process trace and its
environment file (`gputrace run`'s pair, as in examples/workers_saturated/) back with
other people's tools: the Perfetto trace with Perfetto's own proto definitions, the
Parquet `counters` table with pyarrow. Checks them against the samples themselves
(`gputrace dump` of both files), computed here again: each sampled thread's CPU %
(under its thread track, capped at 100), each process of the tree's CPU %, the
machine's busy and iowait %, the environment file's NVML readings on one GPU track
(shown once) and the other processes' SM %. And the Python stack samples: slices on a
"Python (sampled)" track under each sampled thread's track in Perfetto, a row per sample
in the Parquet `python_samples` table.

usage: check_counters.py GPUTRACE OUT_DIR DIR (its *.gtrace: process traces and one
environment file)
"""

import collections
import glob
import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def dump(gputrace, path, kinds):
    out = collections.defaultdict(list)
    for line in run([gputrace, "dump", path]).splitlines():
        r = json.loads(line)
        if r["type"] in kinds:
            out[r["type"]].append(r)
    return out


def pct(part, whole):
    return part / whole * 100


def close(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} values, expected {len(want)}"
    for g, w in zip(got, want):
        assert abs(g - w) <= 0.006, f"{what}: {g}, expected {w:.4f}"


def main():
    gputrace, out_dir, d = sys.argv[1:4]
    files = sorted(glob.glob(os.path.join(d, "*.gtrace")))
    envs = [f for f in files if os.path.basename(f).startswith("gputrace-env-")]
    procs = [f for f in files if f not in envs]
    assert len(envs) == 1 and len(procs) == 1, f"{d}: one process trace and its environment file"
    out = os.path.join(out_dir, "counters.pftrace")
    run([gputrace, "export", "--force", "--format", "perfetto", "-o", out, *files])
    t = pb.Trace()
    with open(out, "rb") as f:
        t.ParseFromString(f.read())
    tracks = {}
    values = collections.defaultdict(list)  # uuid -> [(ts, value)]
    for p in t.packet:
        if p.HasField("track_descriptor"):
            dsc = p.track_descriptor
            assert dsc.uuid not in tracks, f"track {dsc.uuid} described twice"
            if dsc.HasField("parent_uuid"):
                assert dsc.parent_uuid in tracks, f"parent of {dsc.uuid} not described before it"
            tracks[dsc.uuid] = dsc
        if p.HasField("track_event") and p.track_event.type == TE.TYPE_COUNTER:
            e = p.track_event
            assert e.track_uuid in tracks, f"counter on undescribed track {e.track_uuid}"
            assert tracks[e.track_uuid].HasField("counter"), f"counter on slice track {e.track_uuid}"
            v = e.double_counter_value if e.HasField("double_counter_value") else e.counter_value
            values[e.track_uuid].append((p.timestamp, v))
    counters = {u: d for u, d in tracks.items() if d.HasField("counter")}

    def named(name, parent=None):
        us = [u for u, d in counters.items() if d.name == name
              and (parent is None or parent(tracks[d.parent_uuid]))]
        return [sorted(values[u]) for u in us]

    s = dump(gputrace, procs[0], {"thread_cpu", "proc_sample", "machine_sample"})
    e = dump(gputrace, envs[0], {"gpu_sample", "gpu_process"})

    # Each sampled thread: its on-CPU share between consecutive samples, at the first.
    by_tid = collections.defaultdict(list)
    for r in s["thread_cpu"]:
        by_tid[r["tid"]].append(r)
    for tid, rs in by_tid.items():
        want = [min(100.0, pct(max(0, b["cpu_ns"] - a["cpu_ns"]), b["ts_ns"] - a["ts_ns"]))
                for a, b in zip(rs, rs[1:]) if b["ts_ns"] > a["ts_ns"]]
        got = named("CPU %", lambda p: p.HasField("thread") and p.thread.tid == tid)
        if not want:
            # Sampled once: no interval to give a share of, and no track.
            assert not got, f"thread {tid}: a CPU % track from one sample"
            continue
        assert len(got) == 1, f"thread {tid}: {len(got)} CPU % tracks"
        close([v for _, v in got[0]], want, f"thread {tid} CPU %")
    # Each process of the tree (not the thread samples).
    # (By pid: a DataLoader worker renames itself pt_data_worker after its first sample.)
    by_pid = collections.defaultdict(list)
    for r in s["proc_sample"]:
        if r["role"] != "thread":
            by_pid[r["sample_pid"]].append(r)
    for pid, rs in by_pid.items():
        want = [pct(max(0, b["cpu_ns"] - a["cpu_ns"]), b["ts_ns"] - a["ts_ns"])
                for a, b in zip(rs, rs[1:]) if b["ts_ns"] > a["ts_ns"]]
        got = [v for c in {rs[0]["comm"], rs[-1]["comm"]} for v in named(f"pid {pid} ({c}) CPU %")]
        if not want:
            assert not got, f"pid {pid}: a CPU % track from one sample"
            continue
        assert len(got) == 1, f"pid {pid}: {len(got)} CPU % tracks"
        close([v for _, v in got[0]], want, f"pid {pid} CPU %")
    # The machine.
    m = s["machine_sample"]
    busy, iowait = [], []
    for a, b in zip(m, m[1:]):
        dl = {k: max(0, b[k] - a[k]) for k in ("busy_ns", "idle_ns", "iowait_ns", "steal_ns")}
        total = sum(dl.values())
        if b["ts_ns"] > a["ts_ns"] and total > 0:
            busy.append(pct(dl["busy_ns"], total))
            iowait.append(pct(dl["iowait_ns"], total))
    close([v for _, v in named("machine CPU busy %")[0]], busy, "machine busy")
    close([v for _, v in named("machine iowait %")[0]], iowait, "machine iowait")
    # The environment file's NVML samples: one SM clock track per GPU, each value the
    # file's at that time.
    sm = {(r["device"], r["ts_ns"]): r["sm_clock_mhz"] for r in e["gpu_sample"]}
    clocks = named("SM clock (MHz)")
    gpus = {r["device"] for r in e["gpu_sample"]}
    assert len(clocks) == len(gpus), f"{len(clocks)} SM clock tracks for {len(gpus)} GPUs"
    shown = 0
    for u, dsc in counters.items():
        if dsc.name != "SM clock (MHz)":
            continue
        dev = int(tracks[dsc.parent_uuid].name.split()[1])
        for ts, v in values[u]:
            assert sm[(dev, ts)] == v, f"GPU {dev} at {ts}: {v}, file {sm[(dev, ts)]}"
            shown += 1
    # A run whose NVML could not be loaded (examples/env_nvml_unavailable) has no samples
    # to show; any other must show them.
    assert shown > 0 or not gpus, "no NVML samples on the timeline"
    # Other processes' SM share: the file's at each time; never the traced process's.
    share = {(r["device"], r["pid"], r["ts_ns"]): r["sm_pct"] for r in e["gpu_process"]
             if "sm_pct" in r}
    own = {r["pid"] for r in s["thread_cpu"]}
    other_tracks = 0
    for u, dsc in counters.items():
        if not dsc.name.endswith(" SM %"):
            continue
        pid = int(dsc.name.split()[1])
        assert pid not in own, f"the traced process {pid} shown as another on its GPU"
        dev = int(tracks[dsc.parent_uuid].name.split()[1])
        for ts, v in values[u]:
            assert share[(dev, pid, ts)] == v, f"pid {pid} at {ts}: {v}"
        other_tracks += 1
    # GPU counter samples (NVML GPM in the environment file): each value on a "(counters)"
    # track is one of the file's samples, at its start.
    g = dump(gputrace, envs[0], {"counter_sample"})["counter_sample"]
    gpm = {("DRAM % of peak (counters)", r["ts_ns"], r["dram_pct"]) for r in g if "dram_pct" in r}
    gpm |= {("SM active % (counters)", r["ts_ns"], r["sm_active_pct"]) for r in g
            if "sm_active_pct" in r}
    gpm_shown = 0
    for u, dsc in counters.items():
        if dsc.name not in ("DRAM % of peak (counters)", "SM active % (counters)"):
            continue
        for ts, v in values[u]:
            assert (dsc.name, ts, v) in gpm, f"{dsc.name} at {ts}: {v} is no sample of the file"
            gpm_shown += 1
    # The same counters in the Parquet table.
    pqd = os.path.join(out_dir, "counters-parquet")
    run([gputrace, "export", "--force", "--format", "parquet", "-o", pqd, *files])
    c = pq.read_table(os.path.join(pqd, "counters.parquet")).to_pylist()
    n_pf = sum(len(values[u]) for u, d in counters.items()
               if d.name.endswith("%") or d.name.endswith(" (counters)"))
    assert len(c) == n_pf, f"parquet counters: {len(c)} rows, perfetto {n_pf} values"
    # The GPM samples given to the process, one wide row each in `gpu_metrics`, each
    # one of the file's samples.
    gm = pq.read_table(os.path.join(pqd, "gpu_metrics.parquet")).to_pylist()
    starts = {r["ts_ns"] for r in g}
    assert all(r["start_ns"] in starts for r in gm), "a gpu_metrics row that is no sample of the file"
    assert (len(gm) > 0) == (gpm_shown > 0), f"{len(gm)} gpu_metrics rows, {gpm_shown} values shown"
    # Python stack samples: the samples whose stack is known and not empty, each in the
    # Parquet table; on the timeline merged into slices, under their thread's track.
    py = dump(gputrace, procs[0], {"py_sample", "py_stack"})
    stacks = {r["id"] for r in py["py_stack"] if r["frames"]}
    known = [r for r in py["py_sample"] if r["stack"] in stacks]
    rows = pq.read_table(os.path.join(pqd, "python_samples.parquet")).to_pylist()
    assert len(rows) == len(known), f"python_samples: {len(rows)} rows, {len(known)} samples"
    # One descriptor per thread.
    threads = collections.Counter((d.thread.pid, d.thread.tid) for d in tracks.values()
                                  if d.HasField("thread"))
    twice = [k for k, n in threads.items() if n > 1]
    assert not twice, f"threads described more than once: {twice}"
    py_tracks = {u: d for u, d in tracks.items() if d.name.startswith("Python (sampled), thread ")}
    for u, dsc in py_tracks.items():
        parent = tracks[dsc.parent_uuid]
        tid = int(dsc.name.rsplit(" ", 1)[1])
        assert parent.HasField("thread") and parent.thread.tid == tid, f"{dsc.name} under {parent}"
    slices = [p for p in t.packet if p.HasField("track_event")
              and p.track_event.type == TE.TYPE_SLICE_BEGIN and p.track_event.track_uuid in py_tracks]
    assert (len(slices) > 0) == (len(known) > 0), f"{len(slices)} slices of {len(known)} samples"
    assert len(slices) <= len(known), f"{len(slices)} slices of {len(known)} samples"
    print(
        f"counters ok: {d}: {len(by_tid)} threads, {len(by_pid)} processes of the tree, "
        f"{len(busy)} machine intervals, {shown} NVML samples on {len(clocks)} GPU track(s), "
        f"{other_tracks} other process(es)' SM % on a GPU, {gpm_shown} GPM values "
        f"({len(gm)} gpu_metrics rows), "
        f"{len(c)} parquet counter rows, "
        f"{len(known)} Python samples in {len(slices)} slices"
    )


if __name__ == "__main__":
    main()
