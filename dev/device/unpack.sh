#!/usr/bin/env bash
# unpack.sh SRC_DIR DEST_DIR: every SRC_DIR/*.xz -> DEST_DIR/name (executable); other files copied.
set -e
mkdir -p "$2"
for f in "$1"/*; do
  case $f in *.xz) xz -dc "$f" > "$2/$(basename "$f" .xz)"; chmod +x "$2/$(basename "$f" .xz)";; *) cp "$f" "$2/";; esac
done
