#!/usr/bin/env bash
# Sets trainplan up on a fresh Debian 12 machine: installs the Debian packages it needs
# (only those missing), then configures and builds everything in Release under ./build.
# The CUDA backend is built when the CUDA toolkit is at /usr/local/cuda.
set -euo pipefail
cd "$(dirname "$0")"

packages=(build-essential cmake ninja-build python3 pkg-config
          libboost-graph-dev nlohmann-json3-dev catch2 libbenchmark-dev libcli11-dev libfmt-dev libsqlite3-dev libxxhash-dev libjemalloc-dev
          python3-dev pybind11-dev python3-pytest libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
echo "setup: done. Try: ./build/trainplan --help"
