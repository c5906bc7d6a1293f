#!/usr/bin/env bash
# Configures and builds into build/ (CUDA kernels too when nvcc exists). Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=(); command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
cmake --build build --parallel "$(nproc)"
