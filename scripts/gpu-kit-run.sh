#!/usr/bin/env bash
# run.sh of the GPU check kit (built by scripts/gpu-kit.sh; this file is copied into the
# bundle). Start it from the bundle's folder on a machine with the NVIDIA driver and a
# CUDA toolkit or NVRTC wheel; no Rust toolchain or network is needed.
#
# Runs, in order, each step under a timeout, within one overall budget (9 minutes), and
# writes one plain-text report (report.txt here, and $OUT/report.txt when OUT is set):
#   env        nvidia-smi, the libraries found, NVRTC versions and architectures
#   doctor     gyre doctor (backends, memory plan, CUDA driver environment, self-test)
#   cuda-unit  gyre-cuda's unit tests, NVRTC compile tests, device tests
#   suites-1   conformance and fault suites on CUDA, one test thread
#   suites-par the two suites as two processes at once (two contexts on one GPU)
#   toolchains the device tests again with every other NVRTC found (e.g. a wheel newer
#              than the driver: the CUBIN route)
#   demo-*     gyre demo --backend cuda under every transfer strategy
#   soak       a 60 s soak (must print lost: 0)
#   fault      a handler that faults, then a new launch in the same process
#   serve-top  demo --serve, gyre top --once, SIGTERM: clean exit, export file removed
#   kill       SIGKILL with a kernel running: how long until the process is gone, and a
#              new launch afterwards
#   bench      the GPU benchmark (ring kernel vs launch+sync vs graph+sync)
# Every step runs with GYRE_REQUIRE_CUDA=1: a test that cannot reach the GPU fails.
#
# Without a usable GPU every step is reported as skipped, with the reason, and run.sh
# exits 0; with GYRE_REQUIRE_CUDA=1 set by the caller it exits 1 instead.
# Knobs: GYRE_KIT_BUDGET_S (overall budget, default 540), GYRE_KIT_SOAK (default 60s).
set -uo pipefail
cd "$(dirname "$0")"
KIT=$(pwd)
BIN=$KIT/bin
REPORT=$KIT/report.txt
BUDGET=${GYRE_KIT_BUDGET_S:-540}
SOAK=${GYRE_KIT_SOAK:-60s}
CALLER_REQUIRES=${GYRE_REQUIRE_CUDA:-0}
START=$(date +%s)
: >"$REPORT"
export GYRE_LOG=${GYRE_LOG:-warn}
export GYRE_SHM_DIR=${GYRE_SHM_DIR:-/tmp/gyre-kit-shm}
export GYRE_CACHE_DIR=${GYRE_CACHE_DIR:-/tmp/gyre-kit-cache}
mkdir -p "$GYRE_SHM_DIR" "$GYRE_CACHE_DIR"

say() { echo "$*" | tee -a "$REPORT"; }
results=()
failed=0

# step NAME SECONDS CMD...: runs CMD under min(SECONDS, budget left), output to the report.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((START + BUDGET - $(date +%s)))
  if [ -n "${SKIP_ALL:-}" ]; then
    say "== $name: SKIP ($SKIP_ALL)"
    results+=("$name SKIP")
    return 0
  fi
  if [ "$left" -lt 10 ]; then
    say "== $name: SKIP (out of the ${BUDGET}s budget)"
    results+=("$name SKIP(budget)")
    failed=1
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "== $name (timeout ${limit}s): $*"
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$REPORT"
  rc=${PIPESTATUS[0]}
  t1=$(date +%s.%N)
  local took
  took=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
  if [ "$rc" -eq 0 ]; then
    say "== $name: PASS (${took}s)"
    results+=("$name PASS ${took}s")
  else
    [ "$rc" -eq 124 ] && say "== $name: TIMEOUT after ${limit}s"
    say "== $name: FAIL (exit $rc, ${took}s)"
    results+=("$name FAIL(rc=$rc) ${took}s")
    failed=1
  fi
}

say "gyre GPU check kit report, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
[ -f MANIFEST ] && head -4 MANIFEST | tee -a "$REPORT"

# ---- environment facts (always run: they say why a GPU is missing) --------------------
say "== env"
{
  echo "host: $(uname -srm), $(nproc) CPUs"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  echo "libcuda: $(ldconfig -p 2>/dev/null | grep -E 'libcuda\.so' | head -3 | tr '\n' ' ')"
  echo "CUDA_HOME=${CUDA_HOME:-} CUDA_PATH=${CUDA_PATH:-} VIRTUAL_ENV=${VIRTUAL_ENV:-} GYRE_CUDA_VENV=${GYRE_CUDA_VENV:-}"
  [ -x /usr/local/cuda/bin/nvcc ] && /usr/local/cuda/bin/nvcc --version | tail -2
  echo "libnvrtc found:"
  find /usr/local/cuda*/ /usr/lib /opt /usr/local/lib -name 'libnvrtc.so.1[0-9]*' 2>/dev/null | grep -v '\.alt\.' | head -10
} 2>&1 | tee -a "$REPORT"

# Is CUDA usable? gyre doctor's backends table says so, or why not.
doctor_out=$(timeout 120 "$BIN/gyre" doctor 2>&1)
cuda_row=$(grep -E '^\s+cuda ' <<<"$doctor_out" | head -1)
say "cuda: ${cuda_row:-no cuda row in the output of gyre doctor}"
sed -n '/^cuda$/,/^$/p' <<<"$doctor_out" | tee -a "$REPORT"
if ! grep -q 'available: yes' <<<"$cuda_row"; then
  why=$(sed -E 's/.*available: no \((.*)\)$/\1/' <<<"${cuda_row:-gyre doctor failed}")
  SKIP_ALL="no usable GPU: $why"
fi
export GYRE_REQUIRE_CUDA=1

step doctor 90 "$BIN/gyre" doctor
step cuda-unit 60 "$BIN/gyre_cuda_unit" --test-threads=1
step nvrtc-compile 90 env GYRE_REQUIRE_NVRTC=1 "$BIN/nvrtc_compile" --test-threads=2
step cuda-device 150 "$BIN/cuda_backend" --test-threads=1 --nocapture
step conformance-1 150 "$BIN/conformance_cuda" --test-threads=1
step faults-1 120 "$BIN/faults_cuda" --test-threads=1

# The two suites at once, as two processes: two contexts, two sets of ring kernels.
both() {
  "$BIN/conformance_cuda" >"$KIT/par-conformance.log" 2>&1 &
  local a=$!
  "$BIN/faults_cuda" >"$KIT/par-faults.log" 2>&1 &
  local b=$!
  local ra=0 rb=0
  wait $a || ra=$?
  wait $b || rb=$?
  tail -3 "$KIT/par-conformance.log" "$KIT/par-faults.log"
  echo "conformance exit $ra, faults exit $rb"
  [ $ra -eq 0 ] && [ $rb -eq 0 ]
}
step suites-par 150 bash -c "$(declare -f both); BIN='$BIN' KIT='$KIT' both"

# Every other NVRTC on this machine (the first found is the one doctor used).
other_nvrtc() {
  local n=0
  for sp in /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages \
    /usr/lib/python3/dist-packages; do
    [ -d "$sp/nvidia" ] || continue
    local venv=${sp%/lib/python3*}
    for lib in "$sp"/nvidia/cu13/lib/libnvrtc.so.13 "$sp"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12; do
      [ -f "$lib" ] || continue
      n=$((n + 1))
      echo "--- NVRTC from $venv ($lib)"
      GYRE_CUDA_VENV=$venv "$BIN/gyre" doctor 2>&1 | sed -n '/^cuda$/,/^$/p'
      GYRE_CUDA_VENV=$venv "$BIN/cuda_backend" --test-threads=1 echo_round_trip peers_echo || return 1
    done
  done
  echo "$n other NVRTC installation(s) checked"
}
step toolchains 120 bash -c "$(declare -f other_nvrtc); BIN='$BIN' other_nvrtc"

for s in unified sync async dma-polling; do
  step "demo-$s" 60 "$BIN/gyre" demo --backend cuda --strategy "$s" -n 100000
done

soak() {
  local out
  out=$("$BIN/gyre" demo --backend cuda --soak "$SOAK" 2>&1)
  local rc=$?
  echo "$out"
  [ $rc -eq 0 ] && grep -qx 'lost: 0' <<<"$out"
}
step soak 120 bash -c "$(declare -f soak); BIN='$BIN' SOAK='$SOAK' soak"

step fault 60 "$BIN/faults_cuda" --exact device_fault_fails_callers_then_a_new_launch_works --nocapture

serve_top() {
  rm -rf "$GYRE_SHM_DIR"/*
  "$BIN/gyre" demo --backend cuda --serve -n 10000 >"$KIT/serve.log" 2>&1 &
  local pid=$! i
  for i in $(seq 1 200); do
    ls "$GYRE_SHM_DIR"/*/* >/dev/null 2>&1 && break
    sleep 0.1
  done
  echo "export files: $(find "$GYRE_SHM_DIR" -type f | tr '\n' ' ')"
  "$BIN/gyre" top --once
  local top_rc=$?
  local t0 t1
  t0=$(date +%s.%N)
  kill -TERM $pid
  wait $pid
  local rc=$?
  t1=$(date +%s.%N)
  echo "SIGTERM with a kernel running: exit $rc after $(awk "BEGIN{printf \"%.3f\", $t1 - $t0}")s"
  tail -5 "$KIT/serve.log"
  local left
  left=$(find "$GYRE_SHM_DIR" -type f | wc -l)
  echo "export files left: $left"
  [ $top_rc -eq 0 ] && [ $rc -eq 0 ] && [ "$left" -eq 0 ]
}
step serve-top 60 bash -c "$(declare -f serve_top); BIN='$BIN' KIT='$KIT' GYRE_SHM_DIR='$GYRE_SHM_DIR' serve_top"

kill_running() {
  "$BIN/gyre" demo --backend cuda --serve -n 1000 >"$KIT/kill.log" 2>&1 &
  local pid=$! i
  for i in $(seq 1 200); do
    grep -q . "$KIT/kill.log" 2>/dev/null && find "$GYRE_SHM_DIR" -type f | grep -q . && break
    sleep 0.1
  done
  local t0 t1 t2
  t0=$(date +%s.%N)
  kill -KILL $pid
  wait $pid 2>/dev/null
  t1=$(date +%s.%N)
  echo "SIGKILL with a kernel running: process gone after $(awk "BEGIN{printf \"%.3f\", $t1 - $t0}")s"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  "$BIN/gyre" demo --backend cuda -n 10000 | tail -3
  local rc=$?
  t2=$(date +%s.%N)
  echo "a new process launched and ran 10000 round trips $(awk "BEGIN{printf \"%.3f\", $t2 - $t1}")s after the kill (exit $rc)"
  return $rc
}
step kill 60 bash -c "$(declare -f kill_running); BIN='$BIN' KIT='$KIT' GYRE_SHM_DIR='$GYRE_SHM_DIR' kill_running"

step bench 150 "$BIN/cuda_bench" --bench

say ""
say "== summary ($(($(date +%s) - START))s of ${BUDGET}s)"
for r in "${results[@]}"; do say "  $r"; done
if [ -n "${SKIP_ALL:-}" ]; then
  say "every step skipped: $SKIP_ALL"
  [ -n "${OUT:-}" ] && cp "$REPORT" "$OUT/report.txt"
  [ "$CALLER_REQUIRES" = 1 ] && exit 1
  exit 0
fi
[ -n "${OUT:-}" ] && cp "$REPORT" "$OUT/report.txt"
exit $failed
