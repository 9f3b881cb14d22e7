// Exports of cpp/addon/ops.cc: an op runner for tests and microbenchmarks that runs any op of
// cpp/ops/ops.h on any device from plain typed arrays.

export type OpDType = 'float32' | 'bfloat16' | 'float16' | 'int32';

/** A host tensor: Float32Array for float32, Uint16Array (raw bits) for bfloat16/float16, Int32Array for int32. */
export interface OpTensor {
  data: Float32Array | Uint16Array | Int32Array;
  shape: number[];
  dtype: OpDType;
}

export type OpName =
  | 'matmul' | 'embedding' | 'rms_norm' | 'layer_norm' | 'rope' | 'softmax' | 'attention'
  | 'gated_act' | 'add' | 'softcap' | 'kv_write' | 'convert' | 'matmul_accumulate' | 'rms_scaled_gated_act';

/**
 * Inputs by op (names of `inputs`), result, and params:
 * - matmul: x, w, bias? -> y [..., N]
 * - embedding: table, ids; scale -> [T, H]
 * - rms_norm: x, w; eps, addOne -> like x
 * - layer_norm: x, w, b?; eps -> like x
 * - rope: x, positions, invFreq; rotDim, interleaved, mscale -> rotated x
 * - softmax: x -> like x
 * - attention: q, k, v, qPos, kPos; scale, softcap, window, causal, kvCapacity -> [T, Hq, Dv]
 * - gated_act: gate, up; act 'silu' | 'gelu' | 'gelu_tanh' -> like gate
 * - add: a, b -> like a;  softcap: x; cap -> like x
 * - kv_write: src, slots, cache; kvCapacity -> the updated cache
 * - convert: src; outDtype -> src in outDtype
 * - matmul_accumulate: x [M, K], w [N, K], resid [M, N] -> resid + x · w^T
 * - rms_scaled_gated_act: h [T, 2F], x [T, H]; eps, act -> [T, F]: act(s h[:, :F]) * (s h[:, F:]), s = 1 / rms(x row)
 * `outDtype` also picks the result dtype of the other ops (default: the main input's dtype,
 * float32 for embedding). `kvCapacity` places k/v/cache [H, S, D] in storage of [H, kvCapacity, D]
 * (NaN padding) to exercise cache views.
 */
export type OpParams = Record<string, number | boolean | string>;

export interface OpTiming {
  msMedian: number;
  msMin: number;
  /** Median process CPU time (all threads) per run: less noisy than wall time on a busy machine. */
  cpuMsMedian: number;
  iters: number;
}

export interface CpuFeatureReport {
  avx2: boolean;
  avx512f: boolean;
  avx512bw: boolean;
  avx512bf16: boolean;
  avx512vnni: boolean;
  /** The widest kernel family the CPU backend uses (MLXB_CPU caps it). */
  level: 'scalar' | 'avx2' | 'avx512';
  /**
   * How the CPU backend multiplies bf16 weights: 'bf16dot' rounds the activations to bf16 and
   * accumulates in float32 (vdpbf16ps: the default on AMD CPUs with AVX512_BF16, or
   * MLXB_CPU_MATMUL=bf16dot); 'exact' converts the weights to float32 (elsewhere, or
   * MLXB_CPU_MATMUL=exact).
   */
  bf16Matmul: 'exact' | 'bf16dot';
}

export interface NativeOps {
  runOp(name: OpName, device: 'cpu' | 'cuda', inputs: Record<string, OpTensor>, params?: OpParams): Promise<OpTensor>;
  /** Runs the op once to warm up, then `iters` times; wall-clock per run. */
  timeOp(name: OpName, device: 'cpu' | 'cuda', inputs: Record<string, OpTensor>, params: OpParams | undefined, iters: number): Promise<OpTiming>;
  cpuFeatures(): CpuFeatureReport;
}
