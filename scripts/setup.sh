#!/usr/bin/env bash
# Installs the Debian 12 packages DeltaTune builds with (needs root or sudo).
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends \
  build-essential cmake ninja-build ccache pkg-config git ca-certificates file dpkg-dev \
  qt6-base-dev libqcustomplot-dev libgl-dev libyaml-cpp-dev nlohmann-json3-dev libpcre2-dev libutf8proc-dev \
  libsqlite3-dev sqlite3 libpng-dev libjpeg62-turbo-dev libwebp-dev googletest libgtest-dev xvfb xauth python3 >/dev/null
echo "setup: packages installed"
