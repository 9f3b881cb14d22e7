#!/bin/bash
# Here (no GPU): copies this worktree's sources, its compiled TypeScript (dist/) and the Node-API
# headers into DEST (default /work/main/.wt-cuda, git-ignored there) for the device tool's
# `carry`. The addon itself is built on the GPU machine by scripts/cuda/build-device.sh.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-/work/main/.wt-cuda}
rm -rf "$dest"
mkdir -p "$dest/.nodehdr"
cd "$src"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$dest"
cp -r dist "$dest/dist"
cp -r node_modules/node-api-headers/include "$dest/.nodehdr/include"
cp -rL node_modules/node-addon-api "$dest/.nodehdr/node-addon-api"
du -sh "$dest"
