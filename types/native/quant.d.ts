// Exports of cpp/addon/quant.cc: MLX affine quantization of typed arrays, and the quantized CPU
// ops on small arrays (tests). float16/bfloat16 values travel as Uint16Array holding raw bits.
export type NativeFloatDtype = 'float32' | 'float16' | 'bfloat16';
export type NativeFloatArray = Float32Array | Uint16Array;

/** One MLX affine-quantized matrix [rows, cols]. */
export interface NativeQuantWeight {
  packed: Uint32Array;           // [rows, cols * bits / 32]
  scales: NativeFloatArray;      // [rows, cols / groupSize]
  biases: NativeFloatArray;      // [rows, cols / groupSize]
  scaleDtype: NativeFloatDtype;
  rows: number;
  cols: number;
  bits: number;
  groupSize: number;
}

export interface NativeQuantizeInput {
  data: NativeFloatArray;        // [rows, cols] row-major
  dtype: NativeFloatDtype;
  rows: number;
  cols: number;
}

export interface NativeQuantizeOutput {
  packed: Uint32Array;
  scales: NativeFloatArray;
  biases: NativeFloatArray;
}

export interface NativeQuant {
  /** MLX's quantizer, off the JS thread. */
  quantizeAffine(input: NativeQuantizeInput, bits: number, groupSize: number, scaleDtype: NativeFloatDtype): Promise<NativeQuantizeOutput>;
  /** scale * q + bias in float32 (two roundings), [rows * cols]. */
  dequantizeAffine(weight: NativeQuantWeight): Float32Array;
  /** CPU qmatmul: y[m, n] = x[m, :] · dequant(w)[n, :] (+ bias[n]). */
  qmatmulAffine(args: { x: Float32Array; m: number; weight: NativeQuantWeight; bias?: Float32Array }): Float32Array;
  /** CPU qembedding: rows of dequant(w) for ids, times scale. */
  qembeddingAffine(args: { ids: Int32Array; weight: NativeQuantWeight; scale?: number }): Float32Array;
}
