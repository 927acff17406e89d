"""Checks `gputrace report --json` outputs against expect.json.

  python3 check.py RESULTS_DIR [--expect expect.json] [--out summary.json] [--only a,b]

RESULTS_DIR holds one report per workload, named after it: data_starvation.json (or
data_starvation.py.json). Prints a pass/fail table, writes a summary JSON, exits 1 on any
failure.
"""
import argparse, json, os, sys

RANK = {"info": 0, "warn": 1, "critical": 2}
here = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("results")
p.add_argument("--expect", default=os.path.join(here, "expect.json"))
p.add_argument("--out", default=None)
p.add_argument("--only", default=None, help="comma-separated workloads to check (default: all)")
a = p.parse_args()
expect = json.load(open(a.expect))["workloads"]
if a.only:
    keep = {n if n.endswith(".py") else n + ".py" for n in a.only.split(",") if n}
    expect = {k: v for k, v in expect.items() if k in keep}


def load(name):
    stem = name[:-3] if name.endswith(".py") else name
    for f in (stem + ".json", name + ".json"):
        path = os.path.join(a.results, f)
        if os.path.exists(path):
            with open(path) as fh:
                return json.load(fh)
    return None


rows, summary = [], {}
for name, want in expect.items():
    rep = load(name)
    target = want["finding"]
    if rep is None:
        ok, got, why = False, "-", "no report"
    else:
        sev, sub = {}, {}
        for f in rep.get("findings", []):
            sev[f["id"]] = max(sev.get(f["id"], -1), RANK.get(f["severity"], 0))
            if f.get("subcause"):
                sub.setdefault(f["id"], set()).add(f["subcause"])
        warned = sorted(i for i, s in sev.items() if s >= 1)
        got = rep.get("top_finding") or "none"
        if target == "healthy":
            ok = not warned
            why = "no warn-level finding" if ok else "warned: " + ",".join(warned)
        else:
            need = RANK[want.get("min_severity", "warn")]
            ok = sev.get(target, -1) >= need
            why = "found" if ok else ("only info" if target in sev else "missing")
            want_sub = want.get("subcause")
            if ok and want_sub:
                allowed = set([want_sub] if isinstance(want_sub, str) else want_sub)
                got_sub = sub.get(target, set())
                if not got_sub & allowed:
                    ok, why = False, "subcause %s, not %s" % (
                        ",".join(sorted(got_sub)) or "none", "|".join(sorted(allowed)))
                else:
                    why += " (%s)" % ",".join(sorted(got_sub & allowed))
            if ok and want.get("top") and rep.get("top_finding") != target:
                ok, why = False, "present but not the top finding"
        site = want.get("site")
        if ok and site:
            # The finding's call sites (Python) must name this file:line among its top two.
            sites = [c for f in rep.get("findings", []) if f["id"] == target
                     for c in f.get("call_sites", [])[:2]]
            names = ["%s:%s" % (os.path.basename(c["file"]), c["line"]) for c in sites]
            if site in names:
                why += "; line %s" % site
            else:
                ok, why = False, why + "; call sites %s, not %s" % (",".join(names) or "none", site)
        host_in = want.get("host_in")
        if ok and host_in:
            # Where the host was in the finding's gaps (Python stack samples): one of the
            # top two places must be this file:line.
            places = [h for f in rep.get("findings", []) if f["id"] == target
                      for h in f.get("host_was_in", [])[:2]]
            names = ["%s:%s" % (os.path.basename(h["file"]), h["line"]) for h in places]
            if host_in in names:
                why += "; host in %s" % host_in
            else:
                ok, why = False, why + "; host in %s, not %s" % (",".join(names) or "none", host_in)
        bad = [i for i in want.get("not", []) if sev.get(i, -1) >= 1]
        if bad:
            ok, why = False, why + "; must not warn: " + ",".join(bad)
        src = want.get("steps_source")
        if src and rep.get("processes"):
            p0 = max(rep["processes"], key=lambda p: p["steady"]["wall_ns"])
            if p0["steps"]["source"] != src:
                ok, why = False, why + "; steps from %s, not %s" % (p0["steps"]["source"], src)
            else:
                why += "; steps from %s" % src
        if want.get("no_graph_advice"):
            # A job that replays CUDA graphs is never told to capture them.
            advise = [f["id"] for f in rep.get("findings", [])
                      if any(w in f.get("fix", "") for w in ("reduce-overhead", "CUDAGraph", "capture the step"))]
            if advise:
                ok, why = False, why + "; advises CUDA graphs: " + ",".join(advise)
        steady = want.get("steady")
        if steady and rep.get("processes"):
            p0 = max(rep["processes"], key=lambda p: p["steady"]["wall_ns"])
            start_s = p0["steady"]["start_ns"] / 1e9
            spread = p0["steps"]["spread_pct"]
            if start_s < steady.get("min_start_s", 0):
                ok, why = False, why + "; steady state starts at %.2f s" % start_s
            if spread > steady.get("max_spread_pct", 1e18):
                ok, why = False, why + "; step spread %.0f%%" % spread
        measured = want.get("measured")
        if measured and rep.get("processes"):
            # Bounds on the counters NVML GPM measured over the steady state.
            p0 = max(rep["processes"], key=lambda p: p["steady"]["wall_ns"])
            m = p0.get("measured") or {}
            for key, bound in measured.items():
                metric, side = key.rsplit("_", 1)
                v = m.get(metric)
                if v is None:
                    ok, why = False, why + "; %s not measured" % metric
                elif (side == "min" and v < bound) or (side == "max" and v > bound):
                    ok, why = False, why + "; %s %.1f%%, want %s %s" % (metric, v, side, bound)
                else:
                    why += "; %s %.1f%%" % (metric, v)
        if warned:
            got += " [" + ",".join(warned) + "]"
    rows.append((name, target, got, "PASS" if ok else "FAIL", why))
    summary[name] = {"expected": target, "pass": ok, "got": got, "why": why,
                     "verdict": rep.get("verdict") if rep else None}

w = [max(len(r[i]) for r in rows + [("workload", "expected", "got", "result", "why")]) for i in range(5)]
fmt = "  ".join("{:<%d}" % x for x in w)
print(fmt.format("workload", "expected", "got", "result", "why"))
for r in rows:
    print(fmt.format(*r))
passed = sum(1 for r in rows if r[3] == "PASS")
print(f"{passed} passed, {len(rows) - passed} failed")
out = a.out or os.path.join(a.results, "summary.json")
with open(out, "w") as fh:
    json.dump({"passed": passed, "failed": len(rows) - passed, "workloads": summary}, fh, indent=2)
sys.exit(0 if passed == len(rows) else 1)
