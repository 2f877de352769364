#!/usr/bin/env bash
# The whole test suite: unit, integration (conformance and fault injection on every
# backend present, OpenCL included: on PoCL where no GPU is; conformance under every
# transfer strategy on the CPU backend), property and doc tests, the NVRTC compile of
# every CUDA kernel (toolchain from PyPI), the loom models of the ring protocol,
# ThreadSanitizer over the ring and CPU-backend tests, and a bounded soak run.
#
# Usage: scripts/test.sh            (from anywhere inside the repository)
# Knobs: GYRE_SOAK (soak duration, default 60s; 0 skips), GYRE_TSAN=0 (skip TSan),
#        GYRE_KIT=0 (skip building the GPU check kit), LOOM_MAX_PREEMPTIONS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's header carries the time since the start and the size of the build folder,
# so a slow or full CI says where it went.
step() {
  echo "==> [$((SECONDS / 60))m$((SECONDS % 60))s, target $(du -sh "${CARGO_TARGET_DIR:-target}" 2>/dev/null | cut -f1)] $*"
}
# On CI (a clean clone, CI=true) a build folder no later step uses is removed once its
# step passed: the CI machine's disk is small (a run ran out of it in the TSan build).
ci_drop() { if [ "${CI:-}" = true ]; then rm -rf "$@"; fi; }

# CUDA device code without a GPU: NVRTC and ptxas from PyPI (cached in .venv-cuda for
# CUDA 12.8, .venv-cuda13 for 13.0), so the gyre-cuda tests compile and resource-check
# every ring kernel for every architecture each NVRTC supports. The workspace runs with
# 12.8; the compile tests run again with 13.0 below, found as a CUDA 13 toolkit layout.
step "CUDA toolchains (scripts/setup-cuda-venv.sh 12, 13)"
CUDA12_VENV=$(scripts/setup-cuda-venv.sh 12 2>/dev/null | tail -n 1)
CUDA13_VENV=$(scripts/setup-cuda-venv.sh 13 2>/dev/null | tail -n 1)
export GYRE_CUDA_VENV="$CUDA12_VENV"
export GYRE_REQUIRE_NVRTC=1

# OpenCL (default feature `opencl`): tests/conformance_opencl.rs, tests/faults_opencl.rs,
# crates/gyre-opencl/tests and crates/gyre-cli/tests/cli_opencl.rs run on the first device
# with fine-grained SVM: PoCL (OpenCL on the CPU) where no GPU is. This script installs
# PoCL and the ICD loader when they are missing (apt-get, through sudo when not root).
# Where it cannot, or where no OpenCL driver is visible to the ICD loader (OCL_ICD_VENDORS),
# it says so and the OpenCL tests skip; with CI=true a skip is a failure.
opencl_pkgs=(ocl-icd-libopencl1 pocl-opencl-icd)
opencl_note=""
step "OpenCL runtime (PoCL: ${opencl_pkgs[*]})"
if command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for p in "${opencl_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
      if command -v sudo >/dev/null 2>&1; then
        # Non-interactive unless a terminal can answer a password prompt.
        if [ -t 0 ]; then sudo=(sudo); else sudo=(sudo -n); fi
      else
        sudo=(none)
      fi
    fi
    if ! command -v apt-get >/dev/null 2>&1 || [ "${sudo[*]}" = none ]; then
      opencl_note="${missing[*]} missing and this script cannot install them (no apt-get, or not root and no sudo); install them with your package manager"
    else
      echo "installing ${missing[*]} (${sudo[*]:-as root} apt-get install)"
      if "${sudo[@]}" apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
          --no-install-recommends "${missing[@]}" >/dev/null; then
        echo "installed ${missing[*]}"
      else
        opencl_note="installing ${missing[*]} with apt-get failed (see above); run: sudo apt-get install ${missing[*]}"
      fi
    fi
  else
    echo "installed: ${opencl_pkgs[*]}"
  fi
else
  opencl_note="not a Debian-like system (no dpkg-query): install an OpenCL ICD loader and PoCL (or a GPU's OpenCL driver) yourself"
fi
# The ICD loader finds drivers through OCL_ICD_VENDORS (a directory or one .icd file) or
# /etc/OpenCL/vendors; installed but invisible is a skip too.
if [ -z "$opencl_note" ]; then
  icd="${OCL_ICD_VENDORS:-/etc/OpenCL/vendors}"
  if ! { [ -f "$icd" ] || compgen -G "$icd/*.icd" >/dev/null; }; then
    opencl_note="no OpenCL driver is visible to the ICD loader (no .icd file in $icd${OCL_ICD_VENDORS:+, from OCL_ICD_VENDORS})"
  fi
fi
if [ "${CI:-}" = "true" ]; then
  export GYRE_REQUIRE_OPENCL=1
fi
if [ -n "$opencl_note" ]; then
  if [ "${GYRE_REQUIRE_OPENCL:-}" = 1 ]; then
    echo "error: OpenCL is required (CI=true or GYRE_REQUIRE_OPENCL=1) but $opencl_note" >&2
    exit 1
  fi
  echo "NOTE: the OpenCL tests will be skipped: $opencl_note"
fi

# gyre-service (examples/service) depends on gyre with `metrics`, so this run builds and
# tests gyre with that feature too (cargo unifies a workspace's features); the steps
# below that name `-p gyre` alone build it without, as a user's default build is.
step "cargo test --workspace (GYRE_REQUIRE_OPENCL=${GYRE_REQUIRE_OPENCL:-0})"
cargo test --workspace

# The API reference (`cargo doc --open` in the README) without broken or private links.
step "rustdoc (RUSTDOCFLAGS=-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet

# The built-in kernels' device code (cuda/handlers/*.h) over emulated lanes on the CPU
# backend: every multi-lane path of the handlers (strides that do not divide the payload,
# block-shared words, barriers between phases) runs here, where no GPU is (PoCL runs one
# work-item, docs/opencl.md). crates/gyre-cpu/tests/builtins.rs covers 1, 7, 32 and 256.
for lanes in 32 7; do
  step "conformance on the CPU backend, GYRE_CPU_LANES=$lanes"
  GYRE_CPU_LANES=$lanes cargo test -p gyre --test conformance_cpu
done

# The same NVRTC compile tests against CUDA 13.0, found the way a machine with a CUDA 13
# toolkit offers it: CUDA_HOME with lib64/libnvrtc.so.13 and bin/ptxas, nothing else.
step "NVRTC 13 compile tests (CUDA_HOME = a CUDA 13 toolkit layout)"
cuda13_home=target/cuda13-toolkit
cuda13_sp=$("$CUDA13_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$cuda13_home" && mkdir -p "$cuda13_home"
ln -s "$cuda13_sp/nvidia/cu13/lib" "$cuda13_home/lib64"
ln -s "$cuda13_sp/nvidia/cu13/bin" "$cuda13_home/bin"
env -u GYRE_CUDA_VENV CUDA_HOME="$PWD/$cuda13_home" cargo test -p gyre-cuda --test nvrtc_compile
# ... and the handlers #[gyre::handler] generates (tests/portable_nvrtc.rs).
env -u GYRE_CUDA_VENV CUDA_HOME="$PWD/$cuda13_home" cargo test -p gyre --test portable_nvrtc

# loom explores every interleaving of the host-side protocol under a bounded number of
# preemptions: claim/publish (loom_ring), shutdown and drain (loom_shutdown), the
# completion driver's wake path (loom_wake), the doorbell that wakes a parked CPU kernel
# (loom_doorbell), the command hold during a handover (loom_command_gate), a loan block's
# owners and the wake-up of a waiting loan (loom_loans). Its own target dir keeps the
# --cfg from
# invalidating the normal build.
step "loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:=3})"
RUSTFLAGS="--cfg gyre_loom" LOOM_MAX_PREEMPTIONS="$LOOM_MAX_PREEMPTIONS" \
  CARGO_TARGET_DIR=target/loom CARGO_PROFILE_RELEASE_DEBUG=false \
  cargo test -p gyre-core --release --test loom_ring --test loom_shutdown --test loom_wake --test loom_doorbell \
    --test loom_command_gate --test loom_loans
ci_drop target/loom

# ThreadSanitizer on stable: RUSTC_BOOTSTRAP unlocks -Zsanitizer; std is not rebuilt
# (no -Zbuild-std on stable), hence the ABI-mismatch allowance and .ci/tsan.supp (each
# suppression says why; none covers gyre's code). Ring, channel and CPU-kernel tests
# (crates/gyre-cpu/tests/threads.rs runs the kernel, driver and producer threads for
# real). The facade's suites are not run under TSan: their tokio runtime's internals sit
# behind std's uninstrumented Mutex, and TSan's race suppressions match any frame of a
# stack, so silencing them would also silence gyre futures polled on tokio workers.
# Its own target dir, as for loom.
if [ "${GYRE_TSAN:-1}" != 0 ]; then
  step "ThreadSanitizer (target/tsan)"
  RUSTC_BOOTSTRAP=1 \
    RUSTFLAGS="-Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer" \
    RUSTDOCFLAGS="-Zsanitizer=thread -Cunsafe-allow-abi-mismatch=sanitizer" \
    TSAN_OPTIONS="suppressions=$PWD/.ci/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
    CARGO_TARGET_DIR=target/tsan \
    cargo test --target x86_64-unknown-linux-gnu -p gyre-core -p gyre-cpu --lib --tests
  ci_drop target/tsan
fi

# The GPU check kit (docs/cuda.md): it builds (release, stripped, under 60 MiB), and its
# run.sh, with no GPU here, reports every step skipped and exits 0, or 1 when
# GYRE_REQUIRE_CUDA=1. Where a GPU is present, run the kit itself instead.
if [ "${GYRE_KIT:-1}" != 0 ]; then
  step "GPU check kit (scripts/gpu-kit.sh, then its run.sh)"
  kit=$(scripts/gpu-kit.sh 2>/dev/null | tail -n 1)
  doctor_out=$("$kit/bin/gyre" doctor 2>/dev/null || true)
  if grep -qE '^\s+cuda .*available: yes' <<<"$doctor_out"; then
    echo "a GPU is here: run $kit/run.sh for the GPU checks (not run by test.sh)"
  else
    (cd "$kit" && env -u GYRE_REQUIRE_CUDA OUT= ./run.sh >/dev/null)
    grep -q '^every step skipped: no usable GPU' "$kit/report.txt"
    if (cd "$kit" && GYRE_REQUIRE_CUDA=1 ./run.sh >/dev/null); then
      echo "error: the kit's run.sh passed with GYRE_REQUIRE_CUDA=1 and no GPU" >&2
      exit 1
    fi
    echo "run.sh without a GPU: every step skipped (exit 0); with GYRE_REQUIRE_CUDA=1: exit 1"
  fi
  ci_drop target/release
fi

# Soak: mixed load with pause/resume for a bounded time; every message is counted.
if [ "${GYRE_SOAK:=60s}" != 0 ]; then
  step "soak (gyre demo --soak $GYRE_SOAK)"
  soak_out=$(cargo run -q -p gyre-cli -- demo --backend cpu --soak "$GYRE_SOAK")
  echo "$soak_out"
  grep -qx 'lost: 0' <<<"$soak_out"
  # The same through the bridge: device-resident rings, the async copy worker.
  step "soak through the bridge (gyre demo --soak ${GYRE_SOAK_BRIDGE:=20s} --strategy async)"
  soak_out=$(cargo run -q -p gyre-cli -- demo --backend cpu --strategy async --soak "$GYRE_SOAK_BRIDGE")
  echo "$soak_out"
  grep -qx 'lost: 0' <<<"$soak_out"
fi

if [ -n "$opencl_note" ]; then
  step "done; NOTE: the OpenCL tests were skipped: $opencl_note"
fi
