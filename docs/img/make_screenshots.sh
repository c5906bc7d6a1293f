#!/usr/bin/env bash
# Remakes the README's screenshots (docs/img/*.png) with the studio's own --screenshot-dir: the installed
# studio (deltatune-studio on PATH, so the paths shown are an install's) opens the bundled demo, trains it on
# the CPU backend under Xvfb, grabs every page at step 40 of 60, stops the run and quits. HOME is a scratch
# folder, so the pages show a first start (one run in the database).
# Usage: [SCREENSHOT_HOME=/home/someone] docs/img/make_screenshots.sh [STUDIO=deltatune-studio]
# (SCREENSHOT_HOME: an empty folder to use as HOME, so the paths shown are a user's; default: a temp folder)
# 990 px high: the Train page's memory estimate is cut off at 900.
set -euo pipefail
cd "$(dirname "$0")"
studio=${1:-deltatune-studio}
if [ -n "${SCREENSHOT_HOME:-}" ]; then
  home=$SCREENSHOT_HOME
else
  home=$(mktemp -d)
  trap 'rm -rf "$home"' EXIT
fi
HOME="$home" XDG_DATA_HOME="$home/.local/share" XDG_CONFIG_HOME="$home/.config" XDG_CACHE_HOME="$home/.cache" \
  xvfb-run -a -s '-screen 0 1600x1100x24' "$studio" --demo --start --backend cpu \
  --screenshot-dir "$PWD" --screenshot-step 40 -geometry 1526x990+0+0
ls -l ./*.png
