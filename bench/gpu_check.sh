#!/usr/bin/env bash
# On a machine with a GPU: builds kvroom with CUDA, runs the CUDA tests
# (which must run there, not skip) and a device-memory bandwidth benchmark
# against cudaMemcpy. Finishes in under 5 minutes on a 16-core machine.
#
#   bash bench/gpu_check.sh            # build dir: build-gpu
#   BUILD_DIR=/tmp/b bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-gpu}
out=${OUT:-$build}
start=$(date +%s)

command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "gpu_check: nvidia-smi not found"

if [ -n "${PREBUILT:-}" ]; then
  # Binaries packed by bench/gpu_bundle.sh, run through the loader and
  # libraries packed with them (the machine has no CAF to link against).
  pre=$(cd "$PREBUILT" && pwd)
  run() { local b=$1; shift; "$pre/lib/ld-linux-x86-64.so.2" --library-path "$pre/lib:$drv" "$pre/bin/$b" "$@"; }
  # The machine's driver (libcuda), found where drivers are installed.
  drv=$(ldconfig -p 2>/dev/null | sed -n 's|.*libcuda.so.1 (libc6,x86-64) => \(.*\)/libcuda.so.1|\1|p' | head -n 1)
  drv=${drv:-/usr/lib/x86_64-linux-gnu}:/usr/lib64:/usr/local/nvidia/lib64
  out=${OUT:-$pre}
else
  if ! dpkg -s libcaf-dev >/dev/null 2>&1; then
    bash .ci/install-deps
  fi
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVROOM_WITH_CUDA=ON
  cmake --build "$build" -j"$(nproc)" --target kvroom_cli kvroom_bench transport_conformance_test transport_logic_test
  run() {
    local b=$1; shift
    case $b in kvroom) "$build/cli/kvroom" "$@" ;; kvroom-bench) "$build/bench/kvroom-bench" "$@" ;;
      *) "$build/tests/$b" "$@" ;; esac
  }
fi

run kvroom doctor

# The pure logic, then the CUDA conformance suite: exit 77 (skipped) means
# this machine has no usable GPU, which this script treats as a failure.
run transport_logic_test
set +e
run transport_conformance_test cuda
rc=$?
set -e
if [ "$rc" = 77 ]; then
  echo "gpu_check: FAILED: the CUDA suite skipped (see the reason above) on a machine meant to have a GPU"
  exit 1
fi
[ "$rc" = 0 ] || { echo "gpu_check: FAILED: CUDA suite exit $rc"; exit 1; }

# Device-memory bandwidth: GPU 0 to GPU 0 through the cuda backend vs a
# synchronous cudaMemcpy of the same writes, plus the host transports.
mkdir -p "$out"
run kvroom-bench bandwidth --transports=cuda,local --seconds=4 \
  --blocks=4096,65536,1048576,4194304 --batches=1,8,32 --skip-realistic \
  --json="$out/gpu_bandwidth.json"

echo "gpu_check: ok in $(( $(date +%s) - start )) s; results in $out/gpu_bandwidth.json"
