#!/usr/bin/env bash
# The main job: the studio when a display exists, else a headless demo training run on the bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ -x build/app/deltatune-studio ]; then
  exec build/app/deltatune-studio
fi
echo "No display (or no studio build): running the headless demo on the bundled tiny model."
exec build/app/deltatune demo
