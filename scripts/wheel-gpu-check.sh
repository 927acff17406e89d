#!/usr/bin/env bash
# On the GPU machine, builds nothing: installs the gputrace wheel carried in DIR (default
# .whl-gputrace/, as `scripts/wheel.sh build` leaves it) with `pip install --no-index
# --target`, then traces a short PyTorch job with the installed `gputrace run` (and once
# more through `python -m gputrace run`), and prints the kernel counts and the verdict.
#   OUT=/somewhere scripts/wheel-gpu-check.sh [DIR]
# $OUT gets wheel-check.log, report.txt, report.json, summary.json, traces.tgz.
# Exit status 0 only when the wheel installed, both runs exited 0 and each wrote one trace
# with at least MIN_KERNELS kernels (default 2000: the job's add_ calls).
# JOB="CMD ARGS" MIN_KERNELS=N replace the PyTorch job (to try the script off the GPU).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/.whl-gputrace}
OUT=${OUT:-$ROOT/gpu-out}
if [ -z "${WHEEL_CHECK_LOGGED:-}" ]; then
  # Everything into the log too, through a pipe so the log is whole when this ends.
  mkdir -p "$OUT"
  WHEEL_CHECK_LOGGED=1 "$0" "$@" 2>&1 | tee "$OUT/wheel-check.log"
  exit "${PIPESTATUS[0]}"
fi
PY=${PY:-python3}
[ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
MIN_KERNELS=${MIN_KERNELS:-2000}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}

whl=$(ls "$DIR"/gputrace-*.whl 2>/dev/null)
[ "$(echo "$whl" | grep -c .)" = 1 ] || fail "expected one gputrace wheel in $DIR, found: $whl"
echo "wheel: $(basename "$whl"), $(stat -c %s "$whl") bytes"
echo "machine: $(uname -m), $(ldd --version | head -1), python $("$PY" -c 'import sys; print(sys.version.split()[0])')"

# The job's own Python installs it; a throwaway venv's pip if that Python has none.
PIP=("$PY" -m pip)
if ! "${PIP[@]}" --version >/dev/null 2>&1; then
  "$PY" -m venv "$TMP/pipenv" || fail "no pip for $PY and no venv to get one"
  PIP=("$TMP/pipenv/bin/python" -m pip)
fi
SITE=$TMP/site
"${PIP[@]}" install --no-index --no-deps --no-compile --target "$SITE" "$whl" ||
  fail "pip install --no-index --target failed"
G=$SITE/bin/gputrace
ls -l "$SITE/bin" "$SITE/gputrace"
"$G" --version || fail "the installed gputrace does not start"
python3 "$ROOT/python/gputrace_build.py" check "$G" "$SITE/gputrace/libgputrace.so"

cat >"$TMP/job.py" <<'EOF'
# A short PyTorch job: 20 MLP training steps, then 2000 one-kernel add_ calls.
import torch

dev = "cuda"
m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024)).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=1e-3)
xb = torch.randn(256, 1024, device=dev)
for _ in range(20):
    opt.zero_grad(set_to_none=True)
    m(xb).square().mean().backward()
    opt.step()
x = torch.zeros(16, device=dev)
for _ in range(2000):
    x.add_(1)
torch.cuda.synchronize()
print("job done:", float(x[0]))
EOF

# kernels TRACE: the trace's kernel count, from `gputrace summary --json`.
kernels() {
  "$G" summary --json "$1" | python3 -c '
import json, sys
print(sum(d["kernels"] for t in json.load(sys.stdin) for d in t["devices"]))'
}

# run_and_check NAME GPUTRACE...: `GPUTRACE... run -- JOB` with no GPUTRACE_LIB, one trace,
# at least MIN_KERNELS kernels in it.
run_and_check() {
  local name=$1 dir=$TMP/traces-$1 rc n
  shift
  echo "== $name: $* run -o $dir -- ${JOB:-$PY job.py}"
  # shellcheck disable=SC2086 # JOB is a command line
  (cd "$TMP" && env -u GPUTRACE_LIB -u LD_PRELOAD "$@" run -o "$dir" -- ${JOB:-$PY $TMP/job.py}) \
    >"$TMP/$name.out" 2>&1
  rc=$?
  # The job's lines and the verdict (the whole report of the first run is report.txt).
  grep -m1 -B20 '^VERDICT' "$TMP/$name.out" || cat "$TMP/$name.out"
  [ "$rc" = 0 ] || fail "$name: exit status $rc"
  # One process trace (beside it, the environment file `gputrace run` writes).
  local traces
  mapfile -t traces < <(ls "$dir"/*.gtrace 2>/dev/null | grep -v /gputrace-env-)
  { [ "${#traces[@]}" = 1 ] && [ -f "${traces[0]}" ]; } || fail "$name: expected one trace, got: ${traces[*]}"
  n=$(kernels "${traces[0]}")
  echo "$name: ${traces[0]##*/}: $n kernels"
  [ "$n" -ge "$MIN_KERNELS" ] || fail "$name: $n kernels, fewer than $MIN_KERNELS"
}

run_and_check installed "$G"
cp "$TMP/installed.out" "$OUT/report.txt"
T=$(ls "$TMP"/traces-installed/*.gtrace | grep -v /gputrace-env-)
"$G" report --json "$T" >"$OUT/report.json"
"$G" summary --json "$T" >"$OUT/summary.json"
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
for t in json.load(open(sys.argv[2])):
    for d in t["devices"]:
        print("device %d %s: %d kernels, %d memsets, busy %.1f%%"
              % (d["device"], d["name"], d["kernels"], d["memsets"], d["busy_pct"]))
print("verdict:", r["verdict"])' "$OUT/report.json" "$OUT/summary.json"

run_and_check python-m env PYTHONPATH="$SITE" "$PY" -m gputrace

tar czf "$OUT/traces.tgz" -C "$TMP" traces-installed traces-python-m
echo "wheel-gpu-check: passed"
