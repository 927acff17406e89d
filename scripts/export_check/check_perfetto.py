"""Reads `gputrace export --format perfetto` output with Perfetto's own proto
definitions (the `perfetto` package's perfetto_trace_pb2) and checks it the way
trace_processor would build its tables: every track described once, every event on a
described track, interned names defined on their sequence before use, slices begun and
ended in nesting order on each track, every arrow from a launch ending on GPU work;
then the counts against the trace (`gputrace dump`) and the idle time against the
report (`gputrace report --json`).

usage: check_perfetto.py GPUTRACE TRACE.gtrace OUT_DIR
"""

import collections
import json
import subprocess
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def main():
    gputrace, trace, out_dir = sys.argv[1:4]
    out = f"{out_dir}/check.pftrace"
    run([gputrace, "export", "--force", "--format", "perfetto", "-o", out, trace])
    t = pb.Trace()
    with open(out, "rb") as f:
        t.ParseFromString(f.read())

    tracks = {}  # uuid -> descriptor
    names = collections.defaultdict(dict)  # seq -> iid -> name
    cleared = set()
    events = []  # (ts, order, seq, track_event)
    for i, p in enumerate(t.packet):
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in tracks, f"track {d.uuid} described twice"
            if d.HasField("parent_uuid"):
                assert d.parent_uuid in tracks, f"parent of {d.uuid} not described before it"
            tracks[d.uuid] = d
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            cleared.add(seq)
            names[seq].clear()
        if p.HasField("interned_data"):
            assert seq in cleared, f"interned data on sequence {seq} before it was cleared"
            for n in p.interned_data.event_names:
                assert n.iid not in names[seq], f"iid {n.iid} defined twice"
                names[seq][n.iid] = n.name
        if p.HasField("track_event"):
            e = p.track_event
            assert e.track_uuid in tracks, f"event on undescribed track {e.track_uuid}"
            if e.HasField("name_iid"):
                assert e.name_iid in names[seq], f"name iid {e.name_iid} not defined yet"
            events.append((p.timestamp, i, seq, e))

    # Slices per track, as trace_processor nests them: ordered by time, then file order.
    events.sort(key=lambda x: (x[0], x[1]))
    open_ = collections.defaultdict(list)
    slices = collections.Counter()  # (track name, slice name) -> count
    by_track = collections.Counter()
    durations = collections.defaultdict(int)  # (track uuid, name) -> ns
    flows_out, flows_in = set(), set()
    for ts, _, seq, e in events:
        name = names[seq].get(e.name_iid, e.name)
        if e.type == TE.TYPE_SLICE_BEGIN:
            open_[e.track_uuid].append((ts, name))
            flows_out.update(e.flow_ids)
            flows_in.update(e.terminating_flow_ids)
        elif e.type == TE.TYPE_SLICE_END:
            assert open_[e.track_uuid], f"end without begin on track {e.track_uuid} at {ts}"
            start, n = open_[e.track_uuid].pop()
            tname = tracks[e.track_uuid].name
            slices[(tname, n)] += 1
            by_track[tname] += 1
            durations[(e.track_uuid, n)] += ts - start
    assert not any(open_.values()), "slices left open"
    assert flows_in <= flows_out, f"{len(flows_in - flows_out)} arrows end where none starts"

    # Against the trace itself.
    kinds = collections.Counter()
    graph_launches = set()  # (graph, launch correlation id): one replay each
    for line in run([gputrace, "dump", trace]).splitlines():
        ev = json.loads(line)
        kinds[ev["type"]] += 1
        if ev["type"] == "kernel" and ev.get("graph_id"):
            graph_launches.add((ev["graph_id"], ev.get("corr")))
    # A CUDA graph replay is a slice of its own around its kernels ("graph N replay").
    def is_replay(n):
        return n.startswith("graph ") and n.endswith(" replay")
    stream_slices = sum(c for (tn, n), c in slices.items() if tn.startswith("stream ") and not is_replay(n))
    replays = sum(c for (tn, n), c in slices.items() if tn.startswith("stream ") and is_replay(n))
    gpu = kinds["kernel"] + kinds["memcpy"] + kinds["memset"]
    assert stream_slices == gpu, f"{stream_slices} slices on stream tracks, {gpu} GPU records"
    assert replays <= len(graph_launches), f"{replays} replay slices, {len(graph_launches)} graph launches"
    thread_api = sum(
        c
        for (tn, _), c in slices.items()
        if tn not in ("why idle", "steps", "phases", "findings", "NVTX", "NCCL")
        and not tn.startswith("stream ")
        and tn != "CUDA synchronisation"
        and not tn.startswith("NVTX ranges")
    )
    assert thread_api >= kinds["api"], f"{thread_api} thread slices, {kinds['api']} API calls"
    assert slices[("NCCL", "ncclAllReduce")] == sum(
        1 for line in run([gputrace, "dump", trace]).splitlines()
        if '"op":"ncclAllReduce"' in line
    )

    # Against the report: idle pieces inside the steady state add up to its breakdown.
    rep = json.loads(run([gputrace, "report", "--json", trace]))
    proc = rep["processes"][0]
    t0 = proc["trace_start_ns"]
    lo, hi = t0 + proc["steady"]["start_ns"], t0 + proc["steady"]["end_ns"]
    idle = collections.Counter()
    for ts, _, seq, e in events:
        pass
    stack = collections.defaultdict(list)
    for ts, _, seq, e in events:
        if tracks[e.track_uuid].name != "why idle":
            continue
        if e.type == TE.TYPE_SLICE_BEGIN:
            stack[e.track_uuid].append((ts, names[seq].get(e.name_iid, e.name)))
        elif e.type == TE.TYPE_SLICE_END:
            s, n = stack[e.track_uuid].pop()
            idle[n] += max(0, min(ts, hi) - max(s, lo))
    b = proc["breakdown"]
    want = {c["cause"]: c["ns"] for c in b["causes"] + b["unattributed"]}
    got = {k: v for k, v in idle.items() if v > 0}
    if len(proc["devices"]) == 1:
        assert got == want, f"idle by cause: export {got}, report {want}"
    steps = by_track["steps"]
    assert steps == proc["steps"]["count"], f"{steps} step slices, report {proc['steps']['count']}"
    print(
        f"perfetto ok: {trace}: {len(t.packet)} packets, {len(tracks)} tracks, "
        f"{stream_slices} GPU slices = {gpu} records, {kinds['api']} API calls, "
        f"{len(flows_in)} launch arrows, {steps} steps, "
        f"idle {sum(got.values()) / 1e6:.3f} ms by cause = report's"
    )


if __name__ == "__main__":
    main()
