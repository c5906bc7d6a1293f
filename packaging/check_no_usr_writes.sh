#!/usr/bin/env bash
# The installed package writes nothing under its install prefix (/usr): the CLI demo and the studio's demo
# run (offscreen, CPU backend, stopped after a few steps by --screenshot-dir) are started from the unpacked
# package, exactly as from /usr (they find their demo folder next to the program), with HOME and XDG folders
# in a scratch folder. Every file under usr/ is listed with its size, time and checksum before and after; any
# file added, removed or changed fails the check and is named. usr/ is also made read-only, so a write fails
# at once (unless run as root, whom the listing still catches).
# Usage: packaging/check_no_usr_writes.sh [BUILD_DIR=build]   (the newest deltatune_*.deb there, else built)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
deb=$(ls -t "$build"/deltatune_*.deb 2>/dev/null | head -1 || true)
if [ -z "$deb" ]; then
  DT_CPACK_COMPONENTS=main cmake --build "$build" --target package >/dev/null
  deb=$(ls -t "$build"/deltatune_*.deb | head -1)
fi
deb=$(realpath "$deb")
echo "package: $deb"

root=$(mktemp -d)
trap 'chmod -R u+w "$root" 2>/dev/null || true; rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
listing() { (cd "$root/usr" && find . -printf '%y %p %s %T@\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
listing >"$root/before.txt"
chmod -R a-w "$root/usr"

# Only the distribution's libraries (what a machine without the CUDA toolkit offers), as check_deb.sh does.
run() {
  /lib64/ld-linux-x86-64.so.2 --inhibit-cache --library-path /lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu "$@"
}
export HOME="$root/home" XDG_CONFIG_HOME="$root/home/.config" XDG_DATA_HOME="$root/home/.local/share" \
       XDG_CACHE_HOME="$root/home/.cache"
mkdir -p "$HOME"
cd "$HOME"
run "$root/usr/bin/deltatune" demo --max-steps 8 >demo.log 2>&1 || { cat demo.log; exit 1; }
grep -q "^demo run .* finished" demo.log || { cat demo.log; echo "CLI demo did not finish"; exit 1; }
echo "CLI demo: $(grep -c '^step ' demo.log) step lines, output in $(sed -n 's/.*PEFT adapter in //p' demo.log)"
if [ -x "$root/usr/bin/deltatune-studio" ]; then
  QT_QPA_PLATFORM=offscreen run "$root/usr/bin/deltatune-studio" --demo --start --backend cpu \
      --screenshot-dir "$HOME/shots" --screenshot-step 3 >studio.log 2>&1 || { cat studio.log; exit 1; }
  grep -q "^run " studio.log || { cat studio.log; echo "studio demo run did not end"; exit 1; }
  out=$(find "$XDG_DATA_HOME/deltatune/runs/demo" -name 'checkpoint-*' -maxdepth 1 2>/dev/null | head -1)
  [ -n "$out" ] || { cat studio.log; echo "studio demo: no checkpoint under $XDG_DATA_HOME/deltatune/runs/demo"; exit 1; }
  echo "studio demo: $(grep '^run ' studio.log), checkpoint $out"
fi

chmod -R u+w "$root/usr"
listing >"$root/after.txt"
if ! diff "$root/before.txt" "$root/after.txt" >"$root/diff.txt"; then
  echo "written under /usr (the unpacked package) by the demos:"
  grep '^[<>]' "$root/diff.txt" | head -20
  exit 1
fi
echo "no writes under /usr: ok ($(grep -c '^f ' "$root/before.txt") files unchanged)"
