#!/usr/bin/env bash
# run.sh of the GPU check kit (built by scripts/gpu-kit.sh; this file is copied into the
# bundle). Start it from the bundle's folder on a machine with the NVIDIA driver and a
# CUDA toolkit or NVRTC wheel; no Rust toolchain or network is needed.
#
# Runs, in order, each step under a timeout, within one overall budget (6 minutes), and
# writes one plain-text report (report.txt here, and $OUT/report.txt when OUT is set),
# ending with one table: step, result, seconds.
#   env        nvidia-smi, the libraries found, NVRTC versions and architectures
#   bench-*    FIRST, so its figures survive a cut: `gyre bench --backend cuda` under
#              zero copy (the floor, launch+sync and graph+sync in the same process, RTT,
#              throughput against the batch size, the ratios), then under each copy
#              strategy (bench-*.txt beside the report)
#   doctor     gyre doctor (backends, memory plan, CUDA driver environment, self-test)
#   cuda-unit  gyre-cuda's unit tests, NVRTC compile tests, device tests
#   suites-1   conformance and fault suites on CUDA, one test thread (the relaunch cases
#              and the device-fault cases in steps of their own: a device fault can
#              leave a process unable to use CUDA)
#   portable   handlers written once in Rust: the generated C on the GPU against Rust
#   opencl     the GPU through NVIDIA's OpenCL: demo, and conformance over device buffers
#   suites-par the two suites as two processes at once (two contexts on one GPU)
#   toolchains the device tests again with every NVRTC found (toolkits, wheels: one
#              newer than the driver takes the CUBIN route); SKIP when none is found
#   demo-*     gyre demo --backend cuda under every transfer strategy
#   soak       a 30 s soak (must print lost: 0)
#   fault-*    a handler that faults, then a new launch in the same process
#   serve-top  demo --serve, gyre top --once, SIGTERM: clean exit, export file removed
#   kill       SIGKILL with a kernel running: how long until the process is gone, and a
#              new launch afterwards
# Every step runs with GYRE_REQUIRE_CUDA=1: a test that cannot reach the GPU fails.
#
# Without a usable GPU every step is reported as skipped, with the reason, and run.sh
# exits 0; with GYRE_REQUIRE_CUDA=1 set by the caller it exits 1 instead.
# Knobs: GYRE_KIT_BUDGET_S (overall budget, default 360), GYRE_KIT_SOAK (default 30s).
set -uo pipefail
cd "$(dirname "$0")"
KIT=$(pwd)
BIN=$KIT/bin
REPORT=$KIT/report.txt
BUDGET=${GYRE_KIT_BUDGET_S:-360}
SOAK=${GYRE_KIT_SOAK:-30s}
CALLER_REQUIRES=${GYRE_REQUIRE_CUDA:-0}
START=$(date +%s)
: >"$REPORT"
export GYRE_LOG=${GYRE_LOG:-warn}
# The driver reads these at its initialisation; gyre sets them itself only while a
# process has one thread (test binaries have several), so set them here.
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
export GYRE_SHM_DIR=${GYRE_SHM_DIR:-/tmp/gyre-kit-shm}
export BIN KIT
export GYRE_CACHE_DIR=${GYRE_CACHE_DIR:-/tmp/gyre-kit-cache}
mkdir -p "$GYRE_SHM_DIR" "$GYRE_CACHE_DIR"

say() { echo "$*" | tee -a "$REPORT"; }
# The report so far, also under $OUT (so a run killed midway still leaves it).
publish() { if [ -n "${OUT:-}" ]; then cp "$REPORT" "$OUT/report.txt" 2>/dev/null || true; fi; }
results=()
failed=0

# step NAME SECONDS CMD...: runs CMD under min(SECONDS, budget left), output to the
# report. Exit 0 is PASS, 77 SKIP (the step found nothing to check), anything else FAIL.
step() {
  local name=$1 limit=$2
  shift 2
  local label=${STEP_LABEL:-$*}
  STEP_LABEL=
  local left=$((START + BUDGET - $(date +%s)))
  if [ -n "${SKIP_ALL:-}" ]; then
    say "== $name: SKIP ($SKIP_ALL)"
    results+=("$name SKIP -")
    return 0
  fi
  if [ "$left" -lt 10 ]; then
    say "== $name: FAIL (not run: out of the ${BUDGET}s budget)"
    results+=("$name FAIL(budget) -")
    failed=1
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "== $name (timeout ${limit}s): $label"
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$REPORT"
  rc=${PIPESTATUS[0]}
  t1=$(date +%s.%N)
  local took
  took=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
  if [ "$rc" -eq 0 ]; then
    say "== $name: PASS (${took}s)"
    results+=("$name PASS ${took}")
  elif [ "$rc" -eq 77 ]; then
    say "== $name: SKIP (${took}s; see above)"
    results+=("$name SKIP ${took}")
  else
    [ "$rc" -eq 124 ] && say "== $name: TIMEOUT after ${limit}s"
    say "== $name: FAIL (exit $rc, ${took}s)"
    results+=("$name FAIL(rc=$rc) ${took}")
    failed=1
  fi
  publish
}

# fnstep NAME SECONDS FUNCTION: a step running one of the shell functions below, in a
# child bash (so `timeout` can run it), with pipefail.
fnstep() {
  local name=$1 limit=$2 fn=$3
  STEP_LABEL="$fn (see scripts/gpu-kit-run.sh)"
  step "$name" "$limit" bash -c "set -o pipefail; $(declare -f "$fn"); $fn"
}

say "gyre GPU check kit report, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
[ -f MANIFEST ] && head -4 MANIFEST | tee -a "$REPORT"

# ---- environment facts (always run: they say why a GPU is missing) --------------------
# Every libnvrtc on this machine: toolkits, and the NVRTC wheel of every Python found.
find_nvrtc() {
  {
    timeout 20 find /usr/local/cuda*/ /usr/lib /usr/local/lib /opt -name 'libnvrtc.so.1[0-9]' 2>/dev/null
    local py
    for py in python3 /opt/*/.venv/bin/python3 ${VIRTUAL_ENV:+"$VIRTUAL_ENV/bin/python3"}; do
      command -v "$py" >/dev/null 2>&1 || continue
      timeout 20 "$py" - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit
for d in nvidia.__path__:
    for f in glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so.1[0-9]")):
        print(os.path.realpath(f))
PY
    done
  } | grep -v '\.alt\.' | xargs -r -n1 realpath 2>/dev/null | sort -u
}
say "== env"
{
  echo "host: $(uname -srm), $(nproc) CPUs, $(getconf GNU_LIBC_VERSION 2>/dev/null || echo 'glibc unknown')"
  if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  echo "libcuda: $(ldconfig -p 2>/dev/null | grep -E 'libcuda\.so' | head -3 | tr '\n' ' ')"
  echo "CUDA_HOME=${CUDA_HOME:-} CUDA_PATH=${CUDA_PATH:-} VIRTUAL_ENV=${VIRTUAL_ENV:-} GYRE_CUDA_VENV=${GYRE_CUDA_VENV:-} GYRE_NVRTC_LIB=${GYRE_NVRTC_LIB:-}"
  echo "CUDA_MODULE_LOADING=$CUDA_MODULE_LOADING CUDA_DEVICE_MAX_CONNECTIONS=$CUDA_DEVICE_MAX_CONNECTIONS"
  [ -x /usr/local/cuda/bin/nvcc ] && timeout 20 /usr/local/cuda/bin/nvcc --version | tail -2
  echo "libnvrtc found:"
  find_nvrtc | sed 's/^/  /'
} 2>&1 | tee -a "$REPORT"
publish

# The bundled binaries need this glibc (MANIFEST); an older one cannot run them at all.
need_glibc=$(sed -n 's/^needs glibc: //p' MANIFEST 2>/dev/null)
have_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -n "$need_glibc" ] && [ -n "$have_glibc" ] &&
  [ "$(printf '%s\n%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1)" != "$need_glibc" ]; then
  say "error: the bundle needs glibc $need_glibc, this machine has $have_glibc: rebuild the kit on an older system"
  publish
  exit 1
fi

# Is CUDA usable? gyre doctor's backends table says so, or why not.
doctor_out=$(timeout 120 "$BIN/gyre" doctor 2>&1)
cuda_row=$(grep -E '^\s+cuda ' <<<"$doctor_out" | head -1)
say "cuda: ${cuda_row:-no cuda row in the output of gyre doctor}"
sed -n '/^cuda$/,/^$/p' <<<"$doctor_out" | tee -a "$REPORT"
if ! grep -q 'available: yes' <<<"$cuda_row"; then
  why=$(sed -E 's/.*available: no \((.*)\)$/\1/' <<<"${cuda_row:-gyre doctor failed}")
  if command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    # A GPU is here and gyre cannot use it: that is the finding, not a skip.
    say "error: nvidia-smi lists a GPU but gyre's CUDA backend is unusable: $why"
    say "$doctor_out"
    publish
    exit 1
  fi
  SKIP_ALL="no usable GPU: $why"
fi
export GYRE_REQUIRE_CUDA=1

# Bench first: its figures survive a cut of the run. Each strategy's output is kept
# beside the report too.
bench() {
  local strategy=$1 shift_args=("${@:2}")
  "$BIN/gyre" bench --backend cuda --strategy "$strategy" "${shift_args[@]}" | tee "$KIT/bench-$strategy.txt"
  if [ -n "${OUT:-}" ]; then cp "$KIT/bench-$strategy.txt" "$OUT/" 2>/dev/null || true; fi
}
export -f bench
step bench-unified 90 bash -c 'set -o pipefail; bench unified --calls 20000 --max-ms-per-row 1000'
for s in sync async dma-polling; do
  step "bench-$s" 45 bash -c "set -o pipefail; bench $s --calls 5000 --batches 1,32,256 --max-ms-per-row 600"
done

# gyre inside an HTTP service, end to end (docs/service.md): the risk check inline, on the
# CPU backend and on the GPU, one engine at a time, open loop.
service() {
  "$BIN/gyre_load" --service-bin "$BIN/gyre_service" --engines inline,cpu,cuda \
    --rates 5000,20000 --concurrency 64,512 --duration 2 --warmup 0.5 | tee "$KIT/service.txt"
  local rc=${PIPESTATUS[0]}
  if [ -n "${OUT:-}" ]; then cp "$KIT/service.txt" "$OUT/" 2>/dev/null || true; fi
  grep -q '^cuda\.rate' "$KIT/service.txt" && [ "$rc" -eq 0 ]
}
export -f service
fnstep service 60 service

step doctor 60 "$BIN/gyre" doctor
step cuda-unit 60 "$BIN/gyre_cuda_unit" --test-threads=1
step nvrtc-compile 90 env GYRE_REQUIRE_NVRTC=1 "$BIN/nvrtc_compile" --test-threads=2
step cuda-device 90 "$BIN/cuda_backend" --test-threads=1 --skip a_device_fault_is_noticed
step conformance-1 90 "$BIN/conformance_cuda" --test-threads=1 --skip reload --skip epochs --skip restarts
step relaunch-1 60 "$BIN/conformance_cuda" --test-threads=1 reload epochs restarts
step faults-1 90 "$BIN/faults_cuda" --test-threads=1 --skip device_fault
# Handlers written once in Rust (#[gyre::handler]): the generated C through NVRTC on the
# GPU, every reply against the Rust function (tests/portable_handlers.rs).
step portable 90 "$BIN/portable_handlers" --exact portable_handlers_on_cuda_match_rust --nocapture
# A chain of three stages on the GPU, each writing the next stage's ring (tests/pipeline_cuda.rs).
step pipeline 60 "$BIN/pipeline_cuda" --test-threads=1 --nocapture
# Loan kernels on the GPU: zero copy (mapped pinned pool) and sync (device-memory pool the
# bridge fills), every loan case (tests/loans_cuda.rs).
step loans 90 "$BIN/loans_cuda" --test-threads=1
# The GPU through NVIDIA's OpenCL (no fine-grained SVM, OpenCL C 1.2 atomics: the ring
# kernel over device buffers and the copy strategies; docs/opencl.md): the demo, then the
# conformance suite under the planned strategy (tests/conformance_opencl.rs).
step demo-opencl 30 "$BIN/gyre" demo --backend opencl -n 20000
step opencl 90 env GYRE_REQUIRE_OPENCL=1 "$BIN/conformance_opencl" --test-threads=1 planned::

# The two suites at once, as two processes: two contexts, two sets of ring kernels.
both() {
  "$BIN/conformance_cuda" --skip reload --skip epochs --skip restarts >"$KIT/par-conformance.log" 2>&1 &
  local a=$!
  "$BIN/faults_cuda" --skip device_fault >"$KIT/par-faults.log" 2>&1 &
  local b=$!
  local ra=0 rb=0
  wait $a || ra=$?
  wait $b || rb=$?
  tail -3 "$KIT/par-conformance.log" "$KIT/par-faults.log"
  echo "conformance exit $ra, faults exit $rb"
  [ $ra -eq 0 ] && [ $rb -eq 0 ]
}
export BIN KIT
fnstep suites-par 90 both

# Every NVRTC on this machine, each by its library path (GYRE_NVRTC_LIB): the device
# tests compile, load and run with it (a wheel newer than the driver takes the CUBIN
# route). None found besides what doctor used: nothing to check (SKIP).
other_nvrtc() {
  local libs n=0 lib
  libs=$(find_nvrtc)
  for lib in $libs; do
    n=$((n + 1))
    echo "--- NVRTC $lib"
    GYRE_NVRTC_LIB=$lib "$BIN/gyre" doctor 2>&1 | sed -n '/^cuda$/,/^$/p'
    GYRE_NVRTC_LIB=$lib "$BIN/cuda_backend" --test-threads=1 echo_round_trip peers_echo || return 1
  done
  echo "$n NVRTC installation(s) checked"
  [ $n -gt 0 ] || return 77
}
export -f find_nvrtc
fnstep toolchains 60 other_nvrtc

for s in unified sync async dma-polling; do
  step "demo-$s" 30 "$BIN/gyre" demo --backend cuda --strategy "$s" -n 50000
done

soak() {
  local out rc
  out=$("$BIN/gyre" demo --backend cuda --soak "$SOAK" 2>&1)
  rc=$?
  echo "$out"
  [ $rc -eq 0 ] && grep -qx 'lost: 0' <<<"$out"
}
export SOAK
fnstep soak 60 soak

# A device fault last among the tests: it can leave its process unable to use CUDA.
step fault-device 40 "$BIN/cuda_backend" --exact a_device_fault_is_noticed_and_a_later_launch_works --nocapture
step fault 40 "$BIN/faults_cuda" --exact device_fault_fails_callers_then_a_new_launch_works --nocapture

serve_top() {
  rm -rf "${GYRE_SHM_DIR:?}"/*
  "$BIN/gyre" demo --backend cuda --serve -n 10000 >"$KIT/serve.log" 2>&1 &
  local pid=$! i
  for i in $(seq 1 300); do
    [ -n "$(find "$GYRE_SHM_DIR" -type f 2>/dev/null)" ] && break
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
fnstep serve-top 40 serve_top

kill_running() {
  rm -rf "${GYRE_SHM_DIR:?}"/*
  "$BIN/gyre" demo --backend cuda --serve -n 1000 >"$KIT/kill.log" 2>&1 &
  local pid=$! i
  for i in $(seq 1 300); do
    [ -n "$(find "$GYRE_SHM_DIR" -type f 2>/dev/null)" ] && break
    sleep 0.1
  done
  [ -n "$(find "$GYRE_SHM_DIR" -type f 2>/dev/null)" ] || { echo "the served kernel never started"; kill -KILL $pid; return 1; }
  local t0 t1 t2
  t0=$(date +%s.%N)
  kill -KILL $pid
  wait $pid 2>/dev/null
  t1=$(date +%s.%N)
  echo "SIGKILL with a kernel running: process gone after $(awk "BEGIN{printf \"%.3f\", $t1 - $t0}")s"
  command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi --query-compute-apps=pid,used_memory --format=csv
  "$BIN/gyre" demo --backend cuda -n 10000 | tail -3
  local rc=${PIPESTATUS[0]}
  t2=$(date +%s.%N)
  echo "a new process launched and ran 10000 round trips $(awk "BEGIN{printf \"%.3f\", $t2 - $t1}")s after the kill (exit $rc)"
  return $rc
}
fnstep kill 40 kill_running

say ""
say "== summary ($(($(date +%s) - START))s of ${BUDGET}s)"
say "$(printf '%-16s %-14s %8s' step result seconds)"
for r in "${results[@]}"; do
  # shellcheck disable=SC2086 # "name result seconds"
  say "$(printf '%-16s %-14s %8s' $r)"
done
if [ -n "${SKIP_ALL:-}" ]; then
  say "every step skipped: $SKIP_ALL"
  publish
  [ "$CALLER_REQUIRES" = 1 ] && exit 1
  exit 0
fi
publish
exit $failed
