#!/usr/bin/env bash
# Release packages: a Release build in build-deb with every GPU architecture of the release list
# (DT_CUDA_ARCHITECTURES_RELEASE in the root CMakeLists.txt), then both packages (deltatune and
# deltatune-cuda-libs), checked by check_deb.sh. Takes long on few cores (every kernel for every architecture).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-deb}
archs=$(sed -n 's/^set(DT_CUDA_ARCHITECTURES_RELEASE "\([^"]*\)".*/\1/p' CMakeLists.txt)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDT_CUDA=ON -DDT_BUILD_TESTS=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="$archs" ${CMAKE_ARGS:-}
t0=$(date +%s)
cmake --build "$build" --target deltatune deltatune-studio deltatune-cuda
echo "build: $(( $(date +%s) - t0 )) s for CUDA architectures $archs"
DT_CPACK_COMPONENTS=main,cudalibs bash packaging/check_deb.sh "$build"
