#!/usr/bin/env bash
# Builds the .deb packages from an existing build/ and checks them as a machine with only Debian would run
# them: the package is unpacked and its programs started through the loader restricted to the distribution's
# library folders (no ld.so cache, so no /usr/local/cuda): `deltatune --version`, `deltatune info`, the CPU
# demo run and the studio's demo screenshots (offscreen). As root it is also installed with apt (its
# dependencies resolve). Checks the desktop entry, icon, metadata and demo files.
# By default only the main package is built: deltatune-cuda-libs (600 MB of cuBLAS, about 6 minutes of xz on
# 2 cores) is built and checked by packaging/build_deb.sh, which sets DT_CPACK_COMPONENTS=main,cudalibs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
export DT_CPACK_COMPONENTS=${DT_CPACK_COMPONENTS:-main}
rm -f "$build"/deltatune_*.deb "$build"/deltatune-cuda-libs_*.deb
t0=$(date +%s)
cmake --build "$build" --target package >/dev/null
echo "packaging: $(( $(date +%s) - t0 )) s"
# Absolute paths: the checks below run in another folder.
deb=$(realpath "$(ls -t "$build"/deltatune_*.deb | head -1)")
libs_deb=$(ls -t "$build"/deltatune-cuda-libs_*.deb 2>/dev/null | head -1 || true)
[ -z "$libs_deb" ] || libs_deb=$(realpath "$libs_deb")
for d in "$deb" $libs_deb; do
  echo "package: $d ($(( $(stat -c %s "$d") / 1024 )) KiB)"
  dpkg-deb --field "$d" Package Version Depends Recommends | sed 's/^/  /'
done
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -qq "./$deb" >/dev/null 2>&1 || { dpkg -i "$deb" || apt-get install -f -y -qq; }
  /usr/bin/deltatune --version
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
for f in share/applications/deltatune-studio.desktop share/icons/hicolor/scalable/apps/deltatune-studio.svg \
         share/metainfo/io.github.deltatune.studio.metainfo.xml share/deltatune/demo/demo_run.yaml \
         share/deltatune/demo/model/model.safetensors; do
  test -f "$root/usr/$f" || { echo "missing in package: /usr/$f"; exit 1; }
done

# Only the distribution's libraries: what a machine without the CUDA toolkit offers.
run() {
  /lib64/ld-linux-x86-64.so.2 --inhibit-cache --library-path /lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu "$@"
}
export HOME="$root/home" XDG_CONFIG_HOME="$root/home/.config" XDG_DATA_HOME="$root/home/.local/share"
mkdir -p "$HOME"
cd "$root/home"
run "$root/usr/bin/deltatune" --version
# Without the libs package the GPU module reports what to install; with it, the module loads (here without
# a driver: the runtime version shows, the backend stays on the CPU).
run "$root/usr/bin/deltatune" info | tee info.txt
if [ -x "$root/usr/lib/deltatune/libdeltatune-cuda.so" ]; then
  grep -q "deltatune-cuda-libs\|CUDA runtime: [0-9]" info.txt || { echo "info names neither the runtime nor the package to install"; exit 1; }
fi
if [ -n "$libs_deb" ]; then
  dpkg-deb -x "$libs_deb" "$root"
  run "$root/usr/bin/deltatune" info | tee info.txt
  grep -q "CUDA runtime: [0-9]" info.txt || { echo "the GPU module does not load with deltatune-cuda-libs"; exit 1; }
fi
t0=$(date +%s)
run "$root/usr/bin/deltatune" demo >demo.log 2>&1 || { cat demo.log; exit 1; }
tail -2 demo.log
echo "CPU demo run: $(( $(date +%s) - t0 )) s"
if [ -x "$root/usr/bin/deltatune-studio" ]; then
  export QT_QPA_PLATFORM=offscreen
  run "$root/usr/bin/deltatune-studio" --version
  run "$root/usr/bin/deltatune-studio" --demo --start --backend cpu --db "$root/home/studio.db" \
      --screenshot-dir "$root/home/shots" --screenshot-step 5 >studio.log 2>&1 || { cat studio.log; exit 1; }
  n=$(ls "$root/home/shots"/*.png 2>/dev/null | wc -l)
  grep -q "^run " studio.log && [ "$n" -ge 5 ] || { cat studio.log; echo "studio demo: $n screenshots"; exit 1; }
  echo "studio demo screenshots: $n"
fi
echo "package check: ok"
