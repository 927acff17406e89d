#!/usr/bin/env bash
# Regenerate cupti-sys/src/bindings.rs from the CUPTI 13.0 headers, and with
# --layouts also cupti-sys/LAYOUTS.md (record layouts of CUPTI 12.x vs 13.0).
#
# The NVIDIA headers are fetched from PyPI wheels into a temporary folder and
# never enter the repository.
#
# Usage: scripts/gen-cupti-sys.sh [--layouts] [--work DIR] [--keep]
#   --layouts   also fetch the CUPTI 12.x header sets and rewrite LAYOUTS.md
#               (needs gcc)
#   --work DIR  download and unpack into DIR (reused when run again) instead
#               of a fresh temporary folder; implies --keep
#   --keep      leave the temporary folder in place and print its path
#
# Needs: python3 with pip, bindgen-cli $BINDGEN_VERSION
# (cargo install bindgen-cli --version $BINDGEN_VERSION --locked), libclang
# (Debian: apt-get install libclang-dev) and, for --layouts, gcc.
set -euo pipefail

BINDGEN_VERSION=0.72.1
RUST_TARGET=1.80

# The header set the bindings come from: three wheels unpacked into one folder.
CUPTI13=nvidia-cuda-cupti==13.0.85
RUNTIME13=nvidia-cuda-runtime==13.0.96
CRT13=nvidia-cuda-crt==13.0.88

# Header sets measured by --layouts: cupti wheel version and the runtime
# wheel version shipped with it. crt/host_defines.h for CUDA 12 comes from
# the nvcc wheel (it only defines macros; one copy serves every 12.x set).
LAYOUT12=(
  "12.0=12.0.146:12.0.146"
  "12.1=12.1.105:12.1.105"
  "12.2=12.2.142:12.2.140"
  "12.3=12.3.101:12.3.101"
  "12.4=12.4.127:12.4.127"
  "12.5=12.5.82:12.5.82"
  "12.6=12.6.80:12.6.77"
  "12.8=12.8.90:12.8.90"
  "12.9=12.9.79:12.9.79"
)
NVCC12=nvidia-cuda-nvcc-cu12==12.9.86

layouts=0
keep=0
work=""
while [ $# -gt 0 ]; do
  case "$1" in
    --layouts) layouts=1 ;;
    --keep) keep=1 ;;
    --work) work="$2"; keep=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
crate="$repo/cupti-sys"

if [ -z "$work" ]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/gen-cupti-sys.XXXXXX")"
fi
mkdir -p "$work"
if [ "$keep" = 0 ]; then
  trap 'rm -rf "$work"' EXIT
else
  echo "work folder: $work" >&2
fi

have_bindgen="$(bindgen --version 2>/dev/null || true)"
case "$have_bindgen" in
  "bindgen $BINDGEN_VERSION") ;;
  *)
    echo "need bindgen $BINDGEN_VERSION, found '${have_bindgen:-none}':" >&2
    echo "  cargo install bindgen-cli --version $BINDGEN_VERSION --locked" >&2
    exit 1 ;;
esac

# fetch SPEC DIR: download one wheel (no dependencies) into DIR.
fetch() {
  mkdir -p "$2"
  if ! ls "$2"/*.whl >/dev/null 2>&1; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --dest "$2" "$1"
  fi
}

# unpack_include WHEEL_DIR DEST: copy every file under an `include/` folder
# of the wheel(s) in WHEEL_DIR into DEST, keeping the path below include/.
unpack_include() {
  python3 - "$1" "$2" <<'PY'
import os, sys, zipfile, glob
src, dest = sys.argv[1], sys.argv[2]
n = 0
for whl in glob.glob(os.path.join(src, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if "include" not in parts or info.is_dir():
                continue
            rel = parts[parts.index("include") + 1:]
            if not rel or ".." in rel:
                continue
            out = os.path.join(dest, *rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(info) as fi, open(out, "wb") as fo:
                fo.write(fi.read())
            n += 1
if n == 0:
    sys.exit("no include/ files in wheels under " + src)
PY
}

# ---------------------------------------------------------------- bindings
inc13="$work/include-13.0"
for spec in "$CUPTI13" "$RUNTIME13" "$CRT13"; do
  fetch "$spec" "$work/wheels/${spec%%==*}-${spec##*==}"
  unpack_include "$work/wheels/${spec%%==*}-${spec##*==}" "$inc13"
done

for h in cupti.h cupti_runtime_cbid.h cupti_driver_cbid.h \
         generated_cuda_runtime_api_meta.h generated_cuda_meta.h; do
  [ -f "$inc13/$h" ] || { echo "missing header $h in $inc13" >&2; exit 1; }
done
for h in generated_cuda_runtime_api_meta.h generated_cuda_meta.h; do
  grep -q "^#include <$h>" "$inc13/cupti.h" || {
    echo "cupti.h no longer includes $h; add it to cupti-sys/wrapper.h" >&2
    exit 1
  }
done

# Types: everything CUPTI, the runtime API callback parameter structs, and the
# driver API parameter structs of the calls a tracer looks at (launches,
# copies, sets, synchronisation, allocation). Anything they reference is
# pulled in by bindgen as well.
driver_params='cu(Launch|Memcpy|Memset|MemAlloc|MemFree|MemHostAlloc|MemAllocHost|StreamSynchronize|CtxSynchronize|EventSynchronize|StreamWaitEvent|GraphLaunch|ModuleGetFunction|LibraryGetKernel).*_params.*'
types="CUpti.*|CUPTI.*|cuda.*_params.*|$driver_params"

bindgen_args=(
  "$crate/wrapper.h"
  --rust-target "$RUST_TARGET"
  --dynamic-loading Cupti
  --default-enum-style consts
  --no-doc-comments
  --allowlist-function 'cupti.*'
  --allowlist-type "$types"
  --allowlist-var 'CUPTI_.*'
)

raw="$work/bindings.raw.rs"
(cd "$work" && bindgen "${bindgen_args[@]}" -o "$raw" -- -I"$inc13")

out="$crate/src/bindings.rs"
mkdir -p "$crate/src"
{
  echo "// @generated by scripts/gen-cupti-sys.sh -- do not edit by hand."
  echo "//"
  echo "// bindgen $BINDGEN_VERSION, run on cupti-sys/wrapper.h with the headers"
  echo "// of these PyPI wheels unpacked into one include folder:"
  echo "//   $CUPTI13"
  echo "//   $RUNTIME13"
  echo "//   $CRT13"
  echo "// bindgen arguments (header and include path shortened):"
  echo "//   bindgen wrapper.h \\"
  rest=("${bindgen_args[@]:1}")
  i=0
  while [ $i -lt ${#rest[@]} ]; do
    a="${rest[$i]}"
    next="${rest[$((i + 1))]:-}"
    if [ -n "$next" ] && [ "${next#--}" = "$next" ]; then
      printf "//     %s '%s' \\\\\n" "$a" "$next"
      i=$((i + 2))
    else
      printf '//     %s \\\n' "$a"
      i=$((i + 1))
    fi
  done
  echo "//     -- -I<include folder>"
  echo "// The layout assertions below are bindgen's; they are checked at"
  echo "// compile time."
  echo
  cat "$raw"
} > "$out"
echo "wrote $out ($(wc -l < "$out") lines)" >&2

# ----------------------------------------------------------------- layouts
if [ "$layouts" = 1 ]; then
  fetch "$NVCC12" "$work/wheels/nvcc12"
  crt12="$work/crt12"
  if [ ! -f "$crt12/crt/host_defines.h" ]; then
    unpack_include "$work/wheels/nvcc12" "$crt12"
  fi
  sets=()
  for entry in "${LAYOUT12[@]}"; do
    label="${entry%%=*}"
    vers="${entry#*=}"
    cupti_v="${vers%%:*}"
    rt_v="${vers##*:}"
    inc="$work/include-$label"
    fetch "nvidia-cuda-cupti-cu12==$cupti_v" "$work/wheels/cupti-cu12-$cupti_v"
    fetch "nvidia-cuda-runtime-cu12==$rt_v" "$work/wheels/runtime-cu12-$rt_v"
    unpack_include "$work/wheels/runtime-cu12-$rt_v" "$inc"
    unpack_include "$work/wheels/cupti-cu12-$cupti_v" "$inc"
    mkdir -p "$inc/crt"
    cp -r "$crt12/crt/." "$inc/crt/"
    sets+=("$label=$inc")
  done
  sets+=("13.0=$inc13")
  python3 "$crate/tools/cupti_layouts.py" --out "$crate/LAYOUTS.md" "${sets[@]}"
  echo "wrote $crate/LAYOUTS.md" >&2
fi
