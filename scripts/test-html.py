#!/usr/bin/env python3
"""The HTML report in a real browser: for every bundled example, `gputrace report --html`
is opened in headless Chromium (its DOM dumped after the page's script ran), and what the
page shows is checked against `gputrace report --json` of the same traces:

- the page ran to its end with no error and drew: every idle piece and busy stretch of
  the first process's timeline at the whole-trace view, one bar per step listed, and for
  several processes one heat-map cell per step row;
- the verdict, each process's phase shares, each breakdown row's time and share, and the
  findings (their order, ids and shares) are the JSON's, formatted as the text report
  formats them (two decimals rounded half to even, as Rust does).

    scripts/test-html.py [GPUTRACE] [--screenshot PNG]

Without Chromium (/usr/bin/chromium, or $CHROMIUM) it says so and exits 0, unless
GPUTRACE_REQUIRE_BROWSER=1 (CI), where it fails.
"""
import html.parser
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--virtual-time-budget=5000",
]


def dur(ns):
    """units.rs dur."""
    v = float(ns)
    if ns < 1_000:
        return f"{ns} ns"
    if ns < 1_000_000:
        return f"{v / 1e3:.1f} µs"
    if ns < 10_000_000:
        return f"{v / 1e6:.2f} ms"
    if ns < 1_000_000_000:
        return f"{v / 1e6:.1f} ms"
    if ns < 100_000_000_000:
        return f"{v / 1e9:.3f} s"
    return f"{v / 1e9:.1f} s"


def pct(x):
    return "-" if x is None else f"{x:.1f}%"


class Dom(html.parser.HTMLParser):
    """Elements by id and by data-* attribute, with their text."""

    def __init__(self):
        super().__init__()
        self.stack = []
        self.done = []
        self.body = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if tag in ("br", "meta", "link", "img", "input"):
            return
        self.stack.append([tag, a, []])

    def handle_endtag(self, tag):
        while self.stack:
            t, a, txt = self.stack.pop()
            text = "".join(txt)
            self.done.append((t, a, text))
            if self.stack:
                self.stack[-1][2].append(text)
            if t == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2].append(data)

    def find(self, pred):
        return [(t, a, x) for (t, a, x) in self.done if pred(t, a)]


def check(gt, chromium, paths, work, shot=None):
    name = " ".join(os.path.relpath(p, ROOT) for p in paths)
    page = os.path.join(work, "page.html")
    if os.path.exists(page):
        os.remove(page)
    rep = subprocess.run([gt, "report", "--json", *paths], capture_output=True, text=True)
    doc = json.loads(rep.stdout)
    r = subprocess.run([gt, "report", "--html", page, *paths], capture_output=True, text=True)
    if r.returncode not in (0, 3) or not os.path.exists(page):
        return [f"{name}: report --html exited {r.returncode}: {r.stderr.strip()}"]
    prof = os.path.join(work, "profile")
    out = subprocess.run([chromium, *FLAGS, f"--user-data-dir={prof}", "--dump-dom",
                          "file://" + page], capture_output=True, text=True, timeout=120)
    dom = Dom()
    dom.feed(out.stdout)
    errs = []

    def eq(what, got, want):
        if got != want:
            errs.append(f"{name}: {what}: page {got!r}, json {want!r}")

    body = dom.body
    eq("ran to its end", body.get("data-ready"), "1")
    eq("script errors", body.get("data-error"), None)
    # What the page's timeline was given, from its embedded data.
    with open(page, encoding="utf-8") as f:
        text = f.read()
    start = text.index('<script id="data" type="application/json">') + len(
        '<script id="data" type="application/json">')
    data = json.loads(text[start:text.index("</script>", start)])
    eq("embedded report", data["report"], doc)
    procs = doc["processes"]
    if data["tracks"]:
        t = next(t for t in data["tracks"] if t["process"] == 0)
        eq("idle pieces drawn", int(body.get("data-drawn-idle", -1)),
           sum(len(d["pieces"]) // 3 for d in t["idle"]))
        eq("busy stretches drawn", int(body.get("data-drawn-busy", -1)),
           sum(len(s["busy"]) // 2 for s in t["streams"]))
    with_steps = [p for p in procs if p.get("steps", {}).get("list")]
    if with_steps and with_steps[0]["steps"].get("detected"):
        eq("step bars drawn", int(body.get("data-drawn-steps", -1)),
           len(with_steps[0]["steps"]["list"]))
    if len(with_steps) > 1:
        eq("heat map shown", body.get("data-drawn-heat") is not None, True)
        eq("heat-map cells drawn", int(body.get("data-drawn-heat", -1)),
           sum(len(p["steps"]["list"]) for p in with_steps))
    v = dom.find(lambda t, a: a.get("id") == "verdict")
    eq("verdict", v[0][2] if v else None, doc["verdict"])
    for p in procs:
        i = str(p["index"])
        for k in (p.get("run") or {}).get("by_kind", []):
            li = dom.find(lambda t, a: a.get("data-kind") == k["kind"] and a.get("data-process") == i)
            eq(f"phase {k['kind']} share", pct(k["pct"]) in (li[0][2] if li else ""), True)
        b = p.get("breakdown") or {}
        if not b.get("wall_ns"):
            continue
        rows = [("busy", b["busy_ns"], b["busy_pct"])] + [
            (c["cause"], c["ns"], c["pct"]) for c in b["causes"] + b.get("unattributed", [])]
        table = dom.find(lambda t, a: t == "table" and a.get("data-process") == i)
        shown = [(a["data-cause"], x) for (t, a, x) in dom.done if t == "tr" and "data-cause" in a]
        for cause, ns, share in rows:
            want = dur(ns) + pct(share)
            hit = [x for (c, x) in shown if c == cause and want in x]
            eq(f"breakdown {cause} of process {i}", bool(hit) and bool(table), True)
    got = [a["data-id"] for (t, a, x) in dom.done if t == "section" and "data-id" in a]
    eq("findings in order", got, [f["id"] for f in doc["findings"]])
    stakes = [x for (t, a, x) in dom.done if a.get("class") == "stake"]
    eq("findings' shares", stakes, [pct(f["at_stake_pct"]) for f in doc["findings"]])
    if shot:
        subprocess.run([chromium, *FLAGS, f"--user-data-dir={prof}", "--window-size=1280,1500",
                        f"--screenshot={shot}", "file://" + page], capture_output=True, timeout=120)
    print(f"  {name}: {'ok' if not errs else 'FAILED'}")
    return errs


def main():
    args = sys.argv[1:]
    shot = None
    if "--screenshot" in args:
        i = args.index("--screenshot")
        shot = os.path.abspath(args[i + 1])
        del args[i:i + 2]
    gt = os.path.abspath(args[0]) if args else os.path.join(ROOT, "target/debug/gputrace")
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        if os.environ.get("GPUTRACE_REQUIRE_BROWSER") == "1":
            print("test-html: no Chromium (install Debian's chromium)", file=sys.stderr)
            return 1
        print("test-html: skipped (no Chromium; apt-get install chromium)")
        return 0
    ex = os.path.join(ROOT, "examples")
    sets = [[os.path.join(ex, e)] for e in sorted(os.listdir(ex)) if not e.startswith("diff-")]
    errs = []
    with tempfile.TemporaryDirectory() as work:
        # The training example's trace beside a copy of it: read once (a copy is no
        # second process), the page as for one.
        train = os.path.join(ex, "train")
        two = os.path.join(work, "two")
        os.mkdir(two)
        for f in sorted(os.listdir(train)):
            if not f.startswith("gputrace-env"):
                shutil.copy(os.path.join(train, f), os.path.join(two, f))
                shutil.copy(os.path.join(train, f), os.path.join(two, "copy-" + f))
        sets.append([two])
        # A job of 6 ranks (synthetic: no bundled real trace has several), for the rank x
        # step heat map and the compact table of many ranks: written by an ignored test.
        job = os.path.join(work, "job")
        w = subprocess.run(["cargo", "test", "-q", "-p", "gputrace-analyzer", "--test", "html_fixture",
                            "--", "--ignored", "--exact", "write_job_fixture"], cwd=ROOT,
                           env={**os.environ, "GPUTRACE_FIXTURE_OUT": job}, capture_output=True, text=True)
        if w.returncode != 0:
            errs.append(f"the 6-rank fixture: {w.stdout[-2000:]}{w.stderr[-2000:]}")
        else:
            sets.append([job])
        print(f"test-html: {len(sets)} pages in {chromium}")
        for s in sets:
            errs += check(gt, chromium, s, work, shot if s[0] == train else None)
    for e in errs:
        print("  " + e, file=sys.stderr)
    print(f"test-html: {len(sets) - len({e.split(':')[0] for e in errs})} of {len(sets)} pages agree with --json")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
