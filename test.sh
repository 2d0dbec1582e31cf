#!/usr/bin/env bash
# Builds clustersim with its tests and runs them under CTest.
#   ./test.sh            release build (warnings are errors when CI=true)
#   ./test.sh --asan     also build and run the suite under AddressSanitizer + UBSan
#   ./test.sh --fuzz     also build the libFuzzer targets (clang) and run each from a fixed seed
#                        (about a minute each; the same inputs on every machine)
# With CI=true all three run.
set -euo pipefail
cd "$(dirname "$0")"

sanitize=0
fuzz=0
[ "${1:-}" = "--asan" ] && sanitize=1
[ "${1:-}" = "--fuzz" ] && fuzz=1
[ "${CI:-}" = "true" ] && sanitize=1 && fuzz=1
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

if [ "$fuzz" = 1 ]; then
  # The scenario loader and the unit parsers on arbitrary bytes, seeded with the shipped
  # scenarios, from a fixed seed and run count so CI sees the same inputs every time;
  # any crash, hang, sanitizer report or non-InputError fails the run.
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLUSTERSIM_FUZZ=ON \
    -DCLUSTERSIM_REAL_BACKEND=OFF -DCLUSTERSIM_BUILD_TESTS=OFF -DCLUSTERSIM_BUILD_BENCH=OFF
  cmake --build build-fuzz -j"$jobs" --target fuzz_scenario fuzz_units
  root="$PWD"
  corpus="$(mktemp -d)"
  trap 'rm -rf "$corpus"' EXIT
  mkdir -p "$corpus/scenario" "$corpus/units"
  find scenarios/examples -name '*.yaml' -exec cp {} "$corpus/scenario/" \;
  for u in 64MiB 1GiB 2us 5ms 400Gbps 450GB/s 0.5us 1e3B; do printf '%s' "$u" > "$corpus/units/$(printf '%s' "$u" | tr '/' '_')"; done
  (cd "$corpus" && "$root/build-fuzz/fuzz_scenario" -seed=1 -runs=100000 -max_total_time=120 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$root/build-fuzz/" scenario)
  (cd "$corpus" && "$root/build-fuzz/fuzz_units" -seed=1 -runs=5000000 -max_total_time=120 -timeout=10 -artifact_prefix="$root/build-fuzz/" units)
fi
