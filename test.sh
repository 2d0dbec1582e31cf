#!/usr/bin/env bash
# Builds clustersim with its tests and runs them under CTest.
#   ./test.sh            release build (warnings are errors when CI=true)
#   ./test.sh --asan     also build and run the suite under AddressSanitizer + UBSan
# With CI=true both configurations run.
set -euo pipefail
cd "$(dirname "$0")"

sanitize=0
[ "${1:-}" = "--asan" ] && sanitize=1
[ "${CI:-}" = "true" ] && sanitize=1
werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
jobs="$(nproc)"

./setup.sh -DCLUSTERSIM_WERROR="$werror" -DCLUSTERSIM_BUILD_TESTS=ON -DCLUSTERSIM_BUILD_BENCH=ON
(cd build && ctest --output-on-failure -j"$jobs")

if [ "$sanitize" = 1 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCLUSTERSIM_WERROR="$werror" \
    -DCLUSTERSIM_SANITIZE=address,undefined -DCLUSTERSIM_BUILD_BENCH=OFF -DCLUSTERSIM_REAL_BACKEND=OFF
  cmake --build build-asan -j"$jobs"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j"$jobs")
fi
