#!/bin/bash
# On the GPU machine: builds the addon (build-dev/mlxb.node) and the native checks for sm_90 with
# plain cmake, taking the Node-API headers from .nodehdr/ (see stage.sh). Afterwards
#   export MLXB_NATIVE_PATH=$PWD/build-dev/mlxb.node
set -eu
cd "$(dirname "$0")/../.."
cmake -S . -B build-dev -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_JS_INC=$PWD/.nodehdr/include;$PWD/.nodehdr/node-addon-api" >/dev/null
cmake --build build-dev -j "$(nproc)" | tail -1
