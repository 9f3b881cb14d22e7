// Checkpoint artifacts (cpp/addon/artifacts.cc): config.json and safetensors, as read by the
// native loader. Field names are the camelCase forms of cpp/io/config.h and safetensors.h.

export type NativeRopeType = 'default' | 'linear' | 'dynamic' | 'llama3' | 'yarn';
export type NativeActivation = 'silu' | 'gelu' | 'gelu_tanh';
export type NativeLayerType = 'full_attention' | 'sliding_attention';

export interface NativeRopeConfig {
  type: NativeRopeType;
  theta: number;
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  /** 0 = use maxPositionEmbeddings. */
  originalMaxPosition: number;
  betaFast: number;
  betaSlow: number;
  attentionFactor: number | null;
  mscale: number | null;
  mscaleAllDim: number | null;
  truncate: boolean;
  partialRotaryFactor: number;
}

export interface NativeQuantSpec {
  bits: number;
  groupSize: number;
}

export interface NativeModelConfig {
  modelType: string;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  maxPositionEmbeddings: number;
  normEps: number;
  tieWordEmbeddings: boolean;
  attentionBias: boolean;
  mlpBias: boolean;
  hiddenAct: NativeActivation;
  rope: NativeRopeConfig;
  ropeLocal: NativeRopeConfig | null;
  /** 0 = no sliding window. */
  slidingWindow: number;
  layerTypes: NativeLayerType[];
  attnLogitSoftcapping: number;
  finalLogitSoftcapping: number;
  queryPreAttnScalar: number;
  torchDtype: string | null;
  quantization: NativeQuantSpec | null;
  /** Per-module overrides in file order; spec null = left unquantized. */
  quantOverrides: { path: string; spec: NativeQuantSpec | null }[];
  eosTokenIds: number[];
  bosTokenId: number | null;
}

/** A safetensors dtype as written in the file. */
export type NativeFileDType =
  | 'F32' | 'F16' | 'BF16' | 'I32' | 'U32' | 'U8' | 'I8'
  | 'BOOL' | 'I16' | 'U16' | 'I64' | 'U64' | 'F64' | 'C64'
  | 'F8_E4M3' | 'F8_E5M2' | 'F8_E8M0' | 'F4' | 'F6_E2M3' | 'F6_E3M2';

export interface NativeTensorEntry {
  name: string;
  dtype: NativeFileDType;
  shape: number[];
  nbytes: number;
  /** Index into `files`. */
  file: number;
}

export interface NativeWeightsInfo {
  files: string[];
  /** Sorted by name. */
  tensors: NativeTensorEntry[];
  metadata: Record<string, string>;
  totalBytes: number;
}

export interface NativeTensorData {
  dtype: NativeFileDType;
  shape: number[];
  /** Bytes copied through the owned (aligned) read path. */
  data: ArrayBuffer;
  /** The same bytes read through the zero-copy mapped view. */
  mapped: ArrayBuffer;
  ownedAligned: boolean;
}

export interface NativeArtifacts {
  /** Reads and validates `dir`/config.json. */
  readConfig(dir: string): Promise<NativeModelConfig>;
  /** Validates config.json text (synchronous; small input). */
  parseConfig(text: string): NativeModelConfig;
  /** Opens and validates a .safetensors file or a model directory (sharded or not). */
  inspectWeights(path: string): Promise<NativeWeightsInfo>;
  /** One tensor's bytes (usable dtypes only). */
  readTensor(path: string, name: string): Promise<NativeTensorData>;
}
