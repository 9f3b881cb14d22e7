#!/bin/bash
# Here (no GPU): copies this worktree's sources, its compiled TypeScript (dist/) and the Node-API
# headers into DEST (default /work/main/.wt-cuda, git-ignored there) for the device tool's
# `carry`. The addon itself is built on the GPU machine by scripts/cuda/build-device.sh.
#   bash scripts/cuda/stage.sh [DEST] [--tests]
# --tests also packs vitest and the runtime dependencies (scripts/cuda/test-deps.mjs, ~11 MB
# compressed) into DEST/.test-deps.tar.xz; there, `tar -xJf .test-deps.tar.xz` and
#   MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node MLXB_TEST_CUDA=1 node node_modules/vitest/vitest.mjs run test/cuda-*.test.ts
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
tests=0
args=()
for a in "$@"; do
  if [[ $a == --tests ]]; then tests=1; else args+=("$a"); fi
done
dest=${args[0]:-/work/main/.wt-cuda}
rm -rf "$dest"
mkdir -p "$dest/.nodehdr"
cd "$src"
git ls-files -co --exclude-standard | tar -cf - -T - | tar -xf - -C "$dest"
cp -r dist "$dest/dist"
cp -r node_modules/node-api-headers/include "$dest/.nodehdr/include"
cp -rL node_modules/node-addon-api "$dest/.nodehdr/node-addon-api"
if [[ $tests == 1 ]]; then
  node scripts/cuda/test-deps.mjs | tar -cf - -T - | xz -T0 -3 > "$dest/.test-deps.tar.xz"
fi
du -sh "$dest"
