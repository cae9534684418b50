#!/usr/bin/env bash
# A newcomer's first minutes, measured: clone the repository fresh into a temporary folder with empty pip, model and
# Hugging Face caches, run the README's two set-up commands (`bash scripts/demo.sh`, then `bash scripts/test.sh`)
# under /usr/bin/time -v, and `scripts/demo.sh` once more (the wheel then cached, set-up already done). Prints ONE
# JSON line: wall seconds and peak resident memory of each, the CPU (model, cores, SIMD flags) and the commit.
#
# Usage: benchmarks/first_run.sh [--avx2] [--demo-only] [--commit C] [--out FILE] [--logs DIR]
#   --avx2       hold the build and torch to AVX2 (llama.cpp with GGML_NATIVE=OFF and every AVX-512/AMX option
#                off; torch with ATEN_CPU_CAPABILITY=avx2): how an AVX2-only laptop builds and runs, on a bigger CPU
#   --demo-only  the demo (twice), not the test suite
#   --commit C   the commit to clone (default: HEAD of this checkout)
#   --out FILE   also write the JSON object to FILE (e.g. benchmarks/results/first-run-<cpu>.json)
#   --logs DIR   keep each command's output and time report in DIR (the suite's slowest tests are in test.out)
# It compiles llama.cpp from source (minutes of every core): run it on a quiet machine.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
avx2=0
demo_only=0
commit=""
out=""
logs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --avx2) avx2=1 ;;
    --demo-only) demo_only=1 ;;
    --commit) commit="$2"; shift ;;
    --out) out="$2"; shift ;;
    --logs) logs="$2"; shift ;;
    *) echo "usage: $0 [--avx2] [--demo-only] [--commit C] [--out FILE] [--logs DIR]" >&2; exit 2 ;;
  esac
  shift
done
commit="$(git -C "$here" rev-parse "${commit:-HEAD}")"
work="$(mktemp -d "${TMPDIR:-/tmp}/infill-first-run.XXXXXX")"
keep_logs() {
  [ -z "$logs" ] || { mkdir -p "$logs" && cp "$work"/*.out "$work"/*.err "$work"/*.time "$logs"/ 2>/dev/null || true; }
  rm -rf "$work"
}
trap keep_logs EXIT

git clone --quiet --no-hardlinks "$here" "$work/repo"
git -C "$work/repo" checkout --quiet "$commit"
# Every cache a first run fills, empty and inside the temporary folder
export PIP_CACHE_DIR="$work/cache/pip" XDG_CACHE_HOME="$work/cache" HF_HOME="$work/cache/huggingface"
export INFILL_CACHE_DIR="$work/cache/infill-ls"
unset INFILL_MODEL CMAKE_ARGS
if [ "$avx2" = 1 ]; then
  off=""
  for feature in AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AVX_VNNI AMX_TILE AMX_INT8 AMX_BF16; do
    off="$off -DGGML_$feature=OFF"
  done
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_F16C=ON -DGGML_FMA=ON -DGGML_BMI2=ON$off"
  export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
fi

# One command under /usr/bin/time -v: "<exit status> <wall seconds> <peak RSS KiB>" (the largest process's)
measure() {
  local name="$1"
  shift
  local status=0
  (cd "$work/repo" && /usr/bin/time -v -o "$work/$name.time" "$@") >"$work/$name.out" 2>"$work/$name.err" || status=$?
  local wall rss
  wall="$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/$name.time")"
  rss="$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/$name.time")"
  echo "$status $wall $rss"
}

demo="$(measure demo bash scripts/demo.sh)"
demo_again="$(measure demo_again bash scripts/demo.sh)"
tests="skipped"
[ "$demo_only" = 1 ] || tests="$(measure test bash scripts/test.sh)"

python3 - "$work" "$commit" "$avx2" "$demo" "$demo_again" "$tests" "$out" <<'PY'
import json, os, platform, sys

work, commit, avx2, demo, demo_again, tests, out = sys.argv[1:]

def seconds(clock):
    total = 0.0
    for part in clock.split(":"):
        total = total * 60 + float(part)
    return round(total, 1)

def figures(name, line):
    if line == "skipped":
        return None
    status, clock, rss = line.split()
    result = {"exit_status": int(status), "wall_s": seconds(clock), "peak_rss_mib": round(int(rss) / 1024)}
    lines = open(os.path.join(work, name + ".out"), errors="replace").read().splitlines()
    if name.startswith("demo") and lines:
        result["first_fill"] = lines[-1][:400]  # the demo's one JSON object
    if name == "test":
        summary = [line for line in lines if " passed" in line or " failed" in line]
        result["summary"] = summary[-1] if summary else None
    if int(status) != 0:
        result["stderr_tail"] = open(os.path.join(work, name + ".err"), errors="replace").read()[-2000:]
    return result

cpu = {"model": None, "flags": [], "cores": os.cpu_count()}
try:
    for line in open("/proc/cpuinfo"):
        key, _, value = line.partition(":")
        if key.strip() == "model name" and cpu["model"] is None:
            cpu["model"] = value.strip()
        if key.strip() == "flags" and not cpu["flags"]:
            wanted = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile")
            cpu["flags"] = [f for f in value.split() if f in wanted]
except OSError:
    cpu["model"] = platform.processor()
report = {
    "provenance": {"cpu": cpu["model"], "commit": commit, "how": "recorded by benchmarks/first_run.sh as it ran"},
    "what": "first run from a fresh clone with empty caches: scripts/demo.sh, scripts/demo.sh again, scripts/test.sh",
    "commit": commit,
    "cpu": cpu,
    "held_to_avx2": avx2 == "1",
    "demo": figures("demo", demo),
    "demo_again": figures("demo_again", demo_again),
    "test": figures("test", tests),
    "goals": "demo <= 300 s; demo again <= 30 s; test <= 480 s and <= 6144 MiB peak RSS",
}
text = json.dumps(report)
if out:
    with open(out, "w") as f:
        f.write(json.dumps(report, indent=2) + "\n")
print(text)
PY
