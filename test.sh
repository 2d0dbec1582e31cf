#!/usr/bin/env bash
# Builds clustersim with its tests and runs them under CTest.
#   ./test.sh            release build (warnings are errors when CI=true)
#   ./test.sh --asan     also build and run the suite under AddressSanitizer + UBSan
#   ./test.sh --fuzz     also build the libFuzzer targets (clang) and run each from a fixed seed
#                        (45 s to 2 min each, from a fixed seed: the same input sequence on every machine)
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
  # -O1, as AddressSanitizer recommends: the suite runs ~4x faster than at -O0. GCC's
  # (maybe-)uninitialized analysis misfires on instrumented std::regex and boost::optional
  # at -O1, so those two warnings are off in this build only; the release build keeps them.
  # -g1: line tables and function names, all a sanitizer report needs (the build takes
  # 344 s on two cores against 520 s with -g).
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCLUSTERSIM_WERROR="$werror" \
    "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1 -Wno-maybe-uninitialized -Wno-uninitialized" \
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
  cmake --build build-fuzz -j"$jobs" --target fuzz_scenario fuzz_units fuzz_run
  root="$PWD"
  corpus="$(mktemp -d)"
  trap 'rm -rf "$corpus"' EXIT
  mkdir -p "$corpus/scenario" "$corpus/units" "$corpus/run"
  find scenarios/examples -name '*.yaml' -exec cp {} "$corpus/scenario/" \;
  # Whole runs: small self-contained scenarios, some with --set lines after "#--set".
  printf 'cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\nparallel: {tp: 8}\n' > "$corpus/run/tp8"
  printf 'cluster: {preset: dgx-a100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4, seq_len: 1024}\nparallel: {tp: 2, pp: 2}\ntraining: {global_batch: 16, attention: unfused, recompute: selective}\n#--set\nparallel.zero_stage=1\nmodel.dropout=0.1\n' > "$corpus/run/pp2"
  printf 'cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2, dtype: fp8}\nparallel: {tp: 4, sequence_parallel: true, tp_comm_overlap: true}\n#--set\ntraining.global_batch=4\n' > "$corpus/run/fp8"
  printf 'cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: llama3-8b, layers: 2}\ninference: {requests: 16, scheduler: trtllm, arrivals: {process: closed, concurrency: 4}}\n' > "$corpus/run/serve"
  printf 'cluster: {preset: dgx-h100, nodes: 1}\nmodel:\n  blocks:\n    - {type: attention, batch: 4, tokens: 64, hidden: 64, heads: 4}\n    - {type: mlp, axis: column, batch: 4, tokens: 64, hidden: 64, ffn_hidden: 128, stage: 1}\nparallel: {tp: 2, pp: 2}\ntraining: {global_batch: 4}\n' > "$corpus/run/blocks"
  printf 'cluster: {topology_file: %s/scenarios/examples/clusters/h100-beside-a100.topology.yaml}\nmodel: {preset: gpt3-1.3b, layers: 2}\nparallel: {tp: 8, pp: 2, dp: 4}\ntraining: {global_batch: 8}\n' "$root" > "$corpus/run/mixed"
  for u in 64MiB 1GiB 2us 5ms 400Gbps 450GB/s 0.5us 1e3B; do printf '%s' "$u" > "$corpus/units/$(printf '%s' "$u" | tr '/' '_')"; done
  (cd "$corpus" && "$root/build-fuzz/fuzz_scenario" -seed=1 -runs=100000 -max_total_time=45 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$root/build-fuzz/" scenario)
  (cd "$corpus" && "$root/build-fuzz/fuzz_units" -seed=1 -runs=2000000 -max_total_time=60 -timeout=10 -artifact_prefix="$root/build-fuzz/" units)
  (cd "$corpus" && "$root/build-fuzz/fuzz_run" -seed=1 -runs=100000 -max_total_time=120 -timeout=20 -rss_limit_mb=2048 -artifact_prefix="$root/build-fuzz/" run)
fi
