#!/usr/bin/env bash
# run.sh BUILD_DIR CONSUMER_SRC SCRATCH CXX SANITIZE_FLAGS
set -euo pipefail
build=$1 src=$2 scratch=$3 cxx=$4 flags=${5:-}
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$src" -B "$scratch/build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$scratch/build" >/dev/null
"$scratch/build/consumer"
