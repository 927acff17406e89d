#!/usr/bin/env bash
# Which NVML read hangs a PyTorch job when the library samples NVML in-process.
# One device call, builds nothing (carry target/release/libgputrace.so). Each variant runs
# scripts/workloads/pathology/batch1_training.py under LD_PRELOAD with GPUTRACE_NVML=1 and
# one GPUTRACE_NVML_SKIP set, 35 s at most; a run still alive at 20 s gets its threads
# dumped (state, wait channel, the syscall it is in, the library its user pc is in, the
# kernel stack) before it is killed.
#   VARIANTS="off full ms0 events procs" scripts/gpu-nvml-bisect.sh
# Output: $OUT/nvml-bisect.txt (table last), $OUT/nvml-bisect.tgz (logs, dumps).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}; mkdir -p "$OUT"
PY=${PY:-python3}; [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
LIB=$ROOT/target/release/libgputrace.so
W=/tmp/nvml-bisect; rm -rf "$W"; mkdir -p "$W"
VARIANTS=${VARIANTS:-"off full ms0 events procs events,procs,ecc,pcie"}
dump_threads() {  # pid -> text
  "$PY" - "$1" <<'PY'
import os, sys
pid = sys.argv[1]
maps = []
try:
    for l in open(f"/proc/{pid}/maps"):
        p = l.split()
        a, b = (int(x, 16) for x in p[0].split("-"))
        maps.append((a, b, p[5] if len(p) > 5 else "?"))
except OSError as e:
    print("maps:", e)
def lib(pc):
    for a, b, n in maps:
        if a <= pc < b:
            return "%s+0x%x" % (os.path.basename(n), pc - a)
    return hex(pc)
for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
    d = f"/proc/{pid}/task/{tid}"
    def rd(n):
        try:
            return open(f"{d}/{n}").read().strip()
        except OSError as e:
            return f"({e.strerror})"
    comm, wchan, sc = rd("comm"), rd("wchan"), rd("syscall")
    state = rd("stat").split(") ")[-1].split()[0] if "(" in rd("stat") else "?"
    parts = sc.split()
    where = ""
    if len(parts) >= 9:
        where = "pc in " + lib(int(parts[-1], 16))
    print(f"tid {tid} {comm!r} state {state} wchan {wchan} syscall {parts[0] if parts else '?'} {where}")
    ks = rd("stack")
    if ks and not ks.startswith("("):
        print("   " + ks.replace("\n", "\n   "))
PY
}
printf '%-24s %-6s %-8s %s\n' variant rc seconds "last debug line of the env sampler" >"$W/table.txt"
for v in $VARIANTS; do
  env=(GPUTRACE_DIR="$W/t-$v" GPUTRACE_DEBUG=1)
  case "$v" in
    off) env+=(GPUTRACE_NVML=0) ;;
    full) env+=(GPUTRACE_NVML=1) ;;
    ms0) env+=(GPUTRACE_NVML=1 GPUTRACE_NVML_MS=0) ;;
    # The window (and with it NVML) opens 2 s after CUDA is up.
    late) env+=(GPUTRACE_NVML=1 GPUTRACE_MODE=dormant GPUTRACE_START_AFTER=2s GPUTRACE_DURATION=5s) ;;
    *) env+=(GPUTRACE_NVML=1 GPUTRACE_NVML_SKIP="$v") ;;
  esac
  t=$SECONDS
  W1="$ROOT/scripts/workloads/pathology/batch1_training.py"
  if [ "$v" = plain ]; then
    # No gputrace: NVML initialised by a thread of the job itself (ctypes), as CUDA starts.
    timeout -s KILL 35 "$PY" -c '
import ctypes, runpy, sys, threading
def nv():
    n = ctypes.CDLL("libnvidia-ml.so.1")
    c = ctypes.c_uint()
    print("plain nvml: init", n.nvmlInit_v2(), "count", n.nvmlDeviceGetCount_v2(ctypes.byref(c)), c.value, flush=True)
threading.Thread(target=nv).start()
runpy.run_path(sys.argv[1], run_name="__main__")' "$W1" >"$W/$v.log" 2>&1 &
  else
    env "${env[@]}" LD_PRELOAD="$LIB" timeout -s KILL 35 "$PY" "$W1" >"$W/$v.log" 2>&1 &
  fi
  p=$!
  for _ in $(seq 1 20); do sleep 1; kill -0 $p 2>/dev/null || break; done
  if kill -0 $p 2>/dev/null; then
    child=$(pgrep -P $p | head -1)
    [ -n "$child" ] && dump_threads "$child" >"$W/$v.threads.txt" 2>&1
  fi
  wait $p; rc=$?
  last=$(grep -a "environment sampler\|plain nvml" "$W/$v.log" | tail -1 | cut -c1-70)
  printf '%-24s %-6s %-8s %s\n' "$v" "$rc" "$((SECONDS - t))" "$last" >>"$W/table.txt"
done
tar czf "$OUT/nvml-bisect.tgz" -C "$W" --exclude='t-*' .
cp "$W/table.txt" "$OUT/nvml-bisect.txt"
for f in "$W"/*.threads.txt; do [ -f "$f" ] && { echo "== $f"; grep -v '^   ' "$f"; } ; done >>"$OUT/nvml-bisect.txt"
cat "$OUT/nvml-bisect.txt"
