#!/usr/bin/env bash
# Installs the Debian packages clustersim builds with (when missing), then configures
# and builds it in ./build. Usage: ./setup.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")"

packages=(cmake g++ make libboost-graph-dev libyaml-cpp-dev libsqlite3-dev libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin clang libclang-rt-14-dev sqlite3 protobuf-compiler)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

build_type="${BUILD_TYPE:-RelWithDebInfo}"
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" "$@"
cmake --build build -j"$(nproc)"
echo "setup: built build/clustersim"
