#!/bin/bash
# On the GPU machine's host CPU (an AVX-512 Xeon; the development VM has AVX2 only): one call
# that builds the addon CPU-only, runs the native kernel test (every SIMD family the CPU has) and
# the whole vitest suite (cores 2+), and benchmarks 1B bf16 prefill 512 / decode pinned to cores
# 0,1 with 2 threads for each matmul path: AVX-512 exact (default), AVX-512 bf16-dot
# (MLXB_CPU_MATMUL=bf16dot) and AVX2 (MLXB_CPU=avx2). Stage with
#   bash scripts/cuda/stage.sh /work/main/.wt-cpu --tests
# and run there: source .device/prelude.sh; cd .wt-cpu && bash scripts/bench/cpu-device.sh
# Everything goes to $OUT (default /tmp/cpu-out).
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/cpu-out}
mkdir -p "$out"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/log.txt"; }
{ lscpu | grep -E 'Model name|^CPU\(s\)|L1d|L2|L3|MHz'; grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } > "$out/cpu.txt"
(node scripts/bench/make-checkpoint.mjs --shape 1b --out /tmp/ck-1b > /tmp/ck-1b.log 2>&1; echo "exit $?" >> /tmp/ck-1b.log) &
[[ -f .test-deps.tar.xz ]] && tar -xJf .test-deps.tar.xz
stamp "build (CPU only)"
cmake -S . -B build -G Ninja -DMLXB_CUDA=OFF -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_JS_INC=$PWD/.nodehdr/include;$PWD/.nodehdr/node-addon-api" > "$out/build.txt" 2>&1
cmake --build build -j "$(nproc)" >> "$out/build.txt" 2>&1 || { tail -40 "$out/build.txt"; exit 1; }
grep -i 'warning' "$out/build.txt" | head -20
export MLXB_NATIVE_PATH=$PWD/build/mlxb.node
stamp "native kernel test"
./build/cpu_kernels_test > "$out/kernels.txt" 2>&1; echo "exit $?" >> "$out/kernels.txt"
cat "$out/kernels.txt"
stamp "vitest, whole suite, cores 2-$(($(nproc) - 1)) (background)"
(taskset -c 2-$(($(nproc) - 1)) timeout "${VITEST_S:-150}" node node_modules/vitest/vitest.mjs run > "$out/vitest.txt" 2>&1; echo "exit $?" >> "$out/vitest.txt") &
vt=$!
stamp "kernel bench, 2 threads on cores 0,1"
MLXB_NUM_THREADS=2 taskset -c 0,1 ./build/cpu_kernels_test --bench 2>&1 | tee "$out/kernel-bench.txt"
while ! grep -q '^exit' /tmp/ck-1b.log; do sleep 1; done
tail -1 /tmp/ck-1b.log
for mode in avx512 bf16dot avx2; do
  stamp "1B bf16 bench: $mode"
  env_args=(MLXB_NUM_THREADS=2)
  [[ $mode == bf16dot ]] && env_args+=(MLXB_CPU_MATMUL=bf16dot)
  [[ $mode == avx2 ]] && env_args+=(MLXB_CPU=avx2)
  env "${env_args[@]}" taskset -c 0,1 node scripts/bench/bench.mjs --model /tmp/ck-1b --prompt 512 --gen "${GEN:-32}" \
    --runs "${RUNS:-1}" 2>&1 | tee "$out/bench-$mode.txt" | grep -E 'prefill|decode|share'
done
stamp "waiting for vitest"
wait $vt
grep -E 'Test Files|Tests |FAIL|×|exit' "$out/vitest.txt" | head -30
stamp "done"
