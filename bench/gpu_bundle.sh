#!/usr/bin/env bash
# Packs what bench/gpu_check.sh runs (kvroom, kvroom-bench and the transport
# tests, built here with CUDA) with every library `ldd` names, the loader
# included, into one folder: for a GPU machine that has neither CAF nor a
# package registry. There:  PREBUILT=<folder> bash bench/gpu_check.sh
#
#   bash bench/gpu_bundle.sh [BUILD_DIR] [OUT_DIR]   # build, build-gpu-bundle
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-build-gpu-bundle}
grep -q "KVROOM_WITH_CUDA:STRING=\(ON\|AUTO\)" "$build/CMakeCache.txt" \
  || { echo "gpu_bundle: $build is not configured with CUDA"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target kvroom_cli kvroom_bench transport_conformance_test transport_logic_test
rm -rf "$out" && mkdir -p "$out/bin" "$out/lib"
bins=("$build/cli/kvroom" "$build/bench/kvroom-bench" "$build/tests/transport_conformance_test"
      "$build/tests/transport_logic_test")
cp "${bins[@]}" "$out/bin/"
# The driver (libcuda) is the GPU machine's own: cudart is linked statically
# and opens it there; everything else travels.
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }'
done | sort -u | while read -r lib; do cp -L "$lib" "$out/lib/"; done
# What the driver itself links: glibc's own pieces must match the packed libc.
for lib in libdl.so.2 librt.so.1; do cp -L "/lib/x86_64-linux-gnu/$lib" "$out/lib/"; done
du -sh "$out"
