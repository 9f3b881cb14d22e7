/**
 * Public types of @mlx-bun/inference/artifacts. ModelConfig is config.json in one typed form,
 * whatever dialect wrote it (transformers 4.x / >= 5, Gemma 3's local rope base, MLX
 * quantization); defaults for absent keys follow transformers' class of the family.
 */

export type RopeType = 'default' | 'linear' | 'dynamic' | 'llama3' | 'yarn';
export type Activation = 'silu' | 'gelu' | 'gelu_tanh';
export type LayerType = 'full_attention' | 'sliding_attention';

export interface RopeConfig {
  readonly type: RopeType;
  readonly theta: number;
  /** linear / dynamic / llama3 / yarn scaling factor (1 for default). */
  readonly factor: number;
  readonly lowFreqFactor: number;
  readonly highFreqFactor: number;
  /** llama3 / yarn / dynamic; 0 = maxPositionEmbeddings. */
  readonly originalMaxPosition: number;
  readonly betaFast: number;
  readonly betaSlow: number;
  readonly attentionFactor: number | null;
  readonly mscale: number | null;
  readonly mscaleAllDim: number | null;
  readonly truncate: boolean;
  /** Rotated fraction of headDim (1 = all of it). */
  readonly partialRotaryFactor: number;
}

/** MLX affine group quantization. */
export interface QuantSpec {
  readonly bits: number;
  readonly groupSize: number;
}

export interface ModelConfig {
  readonly modelType: string;
  readonly vocabSize: number;
  readonly hiddenSize: number;
  readonly intermediateSize: number;
  readonly numLayers: number;
  readonly numHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly maxPositionEmbeddings: number;
  readonly normEps: number;
  readonly tieWordEmbeddings: boolean;
  readonly attentionBias: boolean;
  readonly mlpBias: boolean;
  readonly hiddenAct: Activation;
  /** Rope of full-attention layers (all layers unless ropeLocal is set). */
  readonly rope: RopeConfig;
  /** Rope of sliding-window layers when it differs (Gemma 3). */
  readonly ropeLocal: RopeConfig | null;
  /** 0 = no layer uses a sliding window. */
  readonly slidingWindow: number;
  /** One entry per layer. */
  readonly layerTypes: readonly LayerType[];
  /** 0 = none. */
  readonly attnLogitSoftcapping: number;
  /** 0 = none. */
  readonly finalLogitSoftcapping: number;
  /** 0 = headDim (attention scale is queryPreAttnScalar^-0.5). */
  readonly queryPreAttnScalar: number;
  readonly torchDtype: string | null;
  readonly quantization: QuantSpec | null;
  /** Per-module settings (module path, e.g. "model.layers.0.mlp.down_proj"); spec null = not quantized. */
  readonly quantOverrides: readonly { readonly path: string; readonly spec: QuantSpec | null }[];
  readonly eosTokenIds: readonly number[];
  readonly bosTokenId: number | null;
}

/** A safetensors dtype as the file names it. Only the first seven can be read as tensors. */
export type FileDType =
  | 'F32' | 'F16' | 'BF16' | 'I32' | 'U32' | 'U8' | 'I8'
  | 'BOOL' | 'I16' | 'U16' | 'I64' | 'U64' | 'F64' | 'C64'
  | 'F8_E4M3' | 'F8_E5M2' | 'F8_E8M0' | 'F4' | 'F6_E2M3' | 'F6_E3M2';

export interface TensorSummary {
  readonly name: string;
  readonly dtype: FileDType;
  readonly shape: readonly number[];
  readonly nbytes: number;
  /** File name of the shard holding it. */
  readonly shard: string;
}

export interface WeightsInfo {
  /** Sorted by name. */
  readonly tensors: readonly TensorSummary[];
  /** Bytes of tensor data over all shards. */
  readonly totalBytes: number;
  /** The floating-point dtype holding most bytes (the checkpoint's working dtype), else the largest. */
  readonly dtype: FileDType | null;
  /** File names of the safetensors files, in index order. */
  readonly shards: readonly string[];
  /** __metadata__ of the safetensors files. */
  readonly metadata: Readonly<Record<string, string>>;
}

export interface CheckpointInfo extends WeightsInfo {
  readonly config: ModelConfig;
  /** Logical parameters: MLX-packed weights count unpacked, scales and biases not at all. */
  readonly parameterCount: number;
}

export interface TensorData {
  readonly dtype: FileDType;
  readonly shape: readonly number[];
  /** Raw little-endian bytes. */
  readonly data: Uint8Array;
}
