#!/usr/bin/env bash
# Packs a build's binaries for the device machine: stripped and xz'd (a stripped binary is ~50 MB, xz'd ~5 MB).
#   dev/device/pack.sh BUILD_DIR DEST_DIR [targets...]   (default targets: the tests, the two benches, the CLI and
#   the CUDA module). Also writes .devcarry/common_xz/lib.tar.xz: the Debian libraries the binaries need that the
#   device image lacks (yaml-cpp, sqlite, utf8proc, pcre2, png, jpeg, webp, zlib).
set -euo pipefail
B=${1:?build dir}; D=${2:?dest dir}; shift 2
T=("$@"); [ ${#T[@]} -eq 0 ] && T=(tests/dt_cuda_tests bench/bench_train_step bench/bench_gdn app/deltatune lib/deltatune/libdeltatune-cuda.so)
mkdir -p "$D"
for t in "${T[@]}"; do strip --strip-unneeded -o "$D/$(basename "$t")" "$B/$t"; xz -T2 -6 -f "$D/$(basename "$t")"; done
L=$(mktemp -d); mkdir -p "$L/lib"
for t in "${T[@]}"; do ldd "$B/$t" 2>/dev/null | awk '/=> \//{print $3}'; done | sort -u |
  grep -v -E 'libc\.so|libm\.so|libgcc_s|libstdc\+\+|ld-linux|libpthread|libdl|librt|libcuda|libcublas|libcudart|libnccl|libnvidia' |
  while read -r l; do cp -L "$l" "$L/lib/"; done
mkdir -p .devcarry/common_xz && tar -cJf .devcarry/common_xz/lib.tar.xz -C "$L" lib && rm -rf "$L"
du -sh "$D" .devcarry/common_xz
