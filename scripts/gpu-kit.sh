#!/usr/bin/env bash
# Builds the GPU check kit: everything needed to check gyre's CUDA backend on a machine
# that has an NVIDIA driver and a CUDA toolkit but no Rust toolchain and no network.
#
# Usage: scripts/gpu-kit.sh            (from anywhere inside the repository)
#   Builds, in release, stripped: the gyre-cuda unit tests, its device tests
#   (cuda_backend) and NVRTC compile tests, the conformance, fault, pipeline and loan suites on CUDA,
#   the conformance suite on OpenCL (the GPU through NVIDIA's OpenCL), the
#   `gyre` binary and the CUDA benchmark; adds run.sh (scripts/gpu-kit-run.sh) and a
#   manifest. The bundle goes to target/gpu-kit (ignored by git; GYRE_KIT_DIR overrides),
#   at most 60 MiB, and the folder is the last line printed.
# On the GPU machine: cd <bundle> && ./run.sh   (see docs/cuda.md, "The GPU check kit").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
KIT=${GYRE_KIT_DIR:-$ROOT/target/gpu-kit}
LIMIT_MIB=60

# No debug info: the kit strips it anyway (below), and with the same settings the bench
# profile reuses the release build of every dependency (measured: 253 s against 285 s
# for a fresh build on 2 cores, the kit byte for byte as large).
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_BENCH_DEBUG=0
echo "==> building release test binaries, gyre, the CUDA bench and the service" >&2
json=$(mktemp)
trap 'rm -f "$json"' EXIT
{
  cargo test --release --no-run --message-format=json -p gyre-cuda --lib \
    --test cuda_backend --test nvrtc_compile
  cargo test --release --no-run --message-format=json -p gyre \
    --test conformance_cuda --test faults_cuda --test portable_handlers --test pipeline_cuda \
    --test loans_cuda --test conformance_opencl
  cargo build --release --message-format=json -p gyre-cli --bin gyre
  cargo build --release --message-format=json -p gyre-service --bins
  cargo bench --no-run --message-format=json -p gyre --bench cuda
} >"$json"

rm -rf "$KIT"
mkdir -p "$KIT/bin"
# One line per executable: <name> <path>, named by its target (the lib's unit tests as
# gyre_cuda_unit, the bench as cuda_bench).
python3 - "$json" "$KIT/bin" <<'EOF'
import json, shutil, sys
seen = {}
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    name = t["name"].replace("-", "_")
    if "lib" in t["kind"]:
        name = name + "_unit"
    elif "bench" in t["kind"]:
        name = name + "_bench"
    seen[name] = m["executable"]
want = {"gyre_cuda_unit", "cuda_backend", "nvrtc_compile", "conformance_cuda",
        "faults_cuda", "portable_handlers", "pipeline_cuda", "loans_cuda", "conformance_opencl",
        "gyre", "cuda_bench",
        "gyre_service", "gyre_load"}
missing = want - set(seen)
if missing:
    sys.exit(f"missing executables: {sorted(missing)}")
for name in sorted(want):
    shutil.copy(seen[name], f"{sys.argv[2]}/{name}")
    print(name, seen[name], file=sys.stderr)
EOF
strip --strip-debug "$KIT"/bin/*
cp scripts/gpu-kit-run.sh "$KIT/run.sh"
chmod +x "$KIT/run.sh" "$KIT"/bin/*
{
  echo "gyre GPU check kit"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
  echo "rustc: $(rustc --version)"
  # The newest glibc symbol version the binaries use: run.sh refuses an older glibc.
  echo "needs glibc: $(objdump -T "$KIT"/bin/* 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
  echo "files:"
  (cd "$KIT" && find . -type f | sort | xargs sha256sum)
} >"$KIT/MANIFEST"

size_kib=$(du -sk "$KIT" | cut -f1)
if [ "$size_kib" -gt $((LIMIT_MIB * 1024)) ]; then
  echo "error: the bundle is $((size_kib / 1024)) MiB, over the $LIMIT_MIB MiB limit" >&2
  exit 1
fi
echo "==> bundle: $((size_kib / 1024)) MiB in $KIT; on the GPU machine: cd <it> && ./run.sh" >&2
echo "$KIT"
