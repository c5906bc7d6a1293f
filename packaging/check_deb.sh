#!/usr/bin/env bash
# Builds the .deb from an existing build/ and checks it: installs it (as root) or unpacks it (otherwise),
# then runs the installed `deltatune --version` and checks the desktop entry, icon, metadata and demo.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cmake --build "$build" --target package >/dev/null
deb=$(ls -t "$build"/deltatune_*.deb | head -1)
echo "package: $deb"
dpkg-deb --info "$deb" | sed -n '/Package:/,/Description:/p'
if [ "$(id -u)" -eq 0 ]; then
  apt-get install -y -qq "./$deb" >/dev/null 2>&1 || { dpkg -i "$deb" || apt-get install -f -y -qq; }
  root=""
else
  root=$(mktemp -d)
  dpkg-deb -x "$deb" "$root"
  export LD_LIBRARY_PATH="$root/usr/lib:${LD_LIBRARY_PATH:-}"
fi
"$root/usr/bin/deltatune" --version
for f in share/applications/deltatune-studio.desktop share/icons/hicolor/scalable/apps/deltatune-studio.svg \
         share/metainfo/io.github.deltatune.studio.metainfo.xml share/deltatune/demo/demo_run.yaml \
         share/deltatune/demo/model/model.safetensors; do
  test -f "$root/usr/$f" || { echo "missing in package: /usr/$f"; exit 1; }
done
if [ -x "$root/usr/bin/deltatune-studio" ]; then
  QT_QPA_PLATFORM=offscreen "$root/usr/bin/deltatune-studio" --version
fi
echo "package check: ok"
