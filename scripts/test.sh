#!/usr/bin/env bash
# The whole test suite: unit, integration (conformance on every backend present, OpenCL
# included: on PoCL where no GPU is), property and doc tests, the NVRTC compile of every
# CUDA kernel (toolchain from PyPI), then the loom models of the ring protocol.
#
# Usage: scripts/test.sh            (from anywhere inside the repository)
set -euo pipefail
cd "$(dirname "$0")/.."

# CUDA device code without a GPU: NVRTC, CCCL headers and ptxas from PyPI (cached in
# .venv-cuda), so the gyre-cuda tests compile and resource-check every ring kernel.
echo "==> CUDA toolchain (scripts/setup-cuda-venv.sh)"
scripts/setup-cuda-venv.sh >/dev/null
export GYRE_REQUIRE_NVRTC=1

# OpenCL (default feature `opencl`): tests/conformance_opencl.rs, crates/gyre-opencl/tests
# and crates/gyre-cli/tests/cli_opencl.rs run on the first device with fine-grained SVM
# (PoCL, installed by .ci/run). Elsewhere they skip, printing why; in CI a skip is a
# failure.
if [ "${CI:-}" = "true" ]; then
  export GYRE_REQUIRE_OPENCL=1
fi

echo "==> cargo test --workspace (GYRE_REQUIRE_OPENCL=${GYRE_REQUIRE_OPENCL:-0})"
cargo test --workspace

echo "==> cargo test -p gyre --features metrics"
cargo test -p gyre --features metrics

# loom explores every interleaving of the host-side protocol under a bounded number of
# preemptions. Its own target dir keeps the --cfg from invalidating the normal build.
echo "==> loom models (LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:=3})"
RUSTFLAGS="--cfg gyre_loom" LOOM_MAX_PREEMPTIONS="$LOOM_MAX_PREEMPTIONS" \
  CARGO_TARGET_DIR=target/loom \
  cargo test -p gyre-core --release --test loom_ring
