"""Summarises one trace of scripts/workloads/hang/hang_job.py for scripts/gpu-hang.sh.

    gputrace dump TRACE | hang_check.py CASE JOB_STDOUT STATUS

Prints one JSON line: the case, the job's exit status, the add kernels it launched (its
last JSON line) and the add kernels the trace holds, the _sleep kernels recorded (with
their durations), the stall reports (count, first one's detection time after the spin
kernel's launch, the operations named, the calls threads were in), the end reason.
"""
import json
import sys

case, job_out, status = sys.argv[1], sys.argv[2], sys.argv[3]
launched = None
try:
    for line in open(job_out):
        line = line.strip()
        if line.startswith("{"):
            launched = json.loads(line).get("add_launched", launched)
except OSError:
    pass

pystacks = {}
adds, kernels, sleeps, stalls, ops, threads, states = 0, 0, [], [], [], [], []
for line in sys.stdin:
    try:
        e = json.loads(line)
    except ValueError:
        continue
    t = e.get("type")
    if t == "kernel":
        kernels += 1
        name = (e.get("name") or "") + " " + (e.get("mangled") or "")
        if "add" in name.lower() and "sleep" not in name.lower():
            adds += 1
        if "spin" in name.lower() or "sleep" in name.lower():
            sleeps.append(round(e.get("dur_ns", 0) / 1e9, 3))
    elif t == "stall":
        stalls.append(e)
    elif t == "stall_op":
        ops.append(e)
    elif t == "stall_thread":
        threads.append(e)
    elif t == "state":
        states.append(e)
    elif t == "py_stack":
        pystacks[e["id"]] = e.get("frames") or []

stopped = [s for s in states if s.get("state") == "stopped"]
first = stalls[0] if stalls else None
op_names = sorted({(o.get("name") or "?")[:80] for o in ops})
calls = sorted({t["call"] for t in threads if t.get("call")})
out = {
    "case": case,
    "status": int(status),
    "add_launched": launched,
    "add_recorded": adds,
    "kernels_recorded": kernels,
    "sleep_kernels_recorded_s": sleeps,
    "stall_reports": len([s for s in stalls if not s.get("resolved")]),
    "stall_resolved": any(s.get("resolved") for s in stalls),
    "stall_end_report": any(s.get("end") for s in stalls),
    "first_stall_after_since_s": round((first["ts_ns"] - first["since_ns"]) / 1e9, 3) if first else None,
    "stall_op_names": op_names,
    "stall_ops_incomplete_record": sum(1 for o in ops if o.get("incomplete_record")),
    "stall_op_starts_known": sum(1 for o in ops if o.get("start_ns")),
    "thread_calls": calls,
    "py_stacks_in_threads": sum(1 for t in threads if t.get("stack")),
    "waiting_at": sorted({
        "%s in %s:%s:%s" % (t["call"], f[0]["file"].rsplit("/", 1)[-1], f[0]["function"], f[0]["line"])
        for t in threads
        if t.get("call") and (f := [x for x in pystacks.get(t.get("stack"), []) if "site-packages" not in x["file"]] or pystacks.get(t.get("stack")))
    }),
    "end_reason": stopped[-1]["reason"] if stopped else None,
}
print(json.dumps(out))
