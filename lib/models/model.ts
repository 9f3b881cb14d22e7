/**
 * Loaded model handles. `loadModel` validates its options, loads on a native worker thread and
 * returns a `Model` that owns the weights until `dispose()` (or `await using`). Other areas of
 * the library reach the native handle through `nativeModel()` (internal, not a public export).
 */
import type { NativeModel, NativeModelConfig } from '../../types/native/models.js';
import { InvalidArgumentError } from '../errors.js';
import { native } from '../native/index.js';

export type ModelDevice = 'cpu' | 'cuda';
export type ModelDtype = 'float32' | 'bfloat16' | 'float16' | 'auto';

export interface LoadProgress {
  /** In [0, 1]. */
  fraction: number;
  /** 'config', 'weights' or 'done'. */
  phase: string;
}

export interface LoadModelOptions {
  /** 'auto' (default) picks CUDA when the addon was built with it and a GPU is present. */
  device?: ModelDevice | 'auto';
  /**
   * Weight dtype. 'auto' (default) keeps the checkpoint's; 'float32' upcasts at load. The CPU
   * backend keeps activations in float32; on AMD CPUs with AVX512_BF16, bf16 weights multiply
   * activations rounded to bf16 (float32 accumulation, as a bf16 model computes in torch; about
   * twice as fast there), elsewhere (or with MLXB_CPU_MATMUL=exact) float32-exact products.
   */
  dtype?: ModelDtype;
  onProgress?: (progress: LoadProgress) => void;
}

/** Hyperparameters of a loaded model, read from config.json (any dialect). */
export type ModelConfig = Readonly<NativeModelConfig>;

const natives = new WeakMap<Model, NativeModel>();

export class Model implements Disposable, AsyncDisposable {
  readonly config: ModelConfig;
  readonly device: ModelDevice;
  readonly dtype: ModelDtype;
  /** Bytes of weights held (on the model's device). */
  readonly weightBytes: number;
  #disposed = false;

  /** @internal use loadModel() */
  constructor(handle: NativeModel, dtype: ModelDtype) {
    natives.set(this, handle);
    this.config = Object.freeze(handle.config());
    const info = handle.info();
    this.device = info.device;
    this.weightBytes = info.weightBytes;
    this.dtype = dtype;
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  /** Frees the weights (after any running work). Later use throws InvalidArgumentError. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    natives.get(this)?.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}

/** The native handle of a live model; InvalidArgumentError when disposed or not a Model. */
export function nativeModel(model: Model, field = 'model'): NativeModel {
  const h = model instanceof Model ? natives.get(model) : undefined;
  if (!h) throw new InvalidArgumentError(`${field} must be a model returned by loadModel()`, field);
  if (model.disposed) throw new InvalidArgumentError(`${field} was disposed`, field);
  return h;
}

const DEVICES: ReadonlyArray<string> = ['cpu', 'cuda', 'auto'];
const DTYPES: ReadonlyArray<string> = ['float32', 'bfloat16', 'float16', 'auto'];

function checkOptions(options: unknown): LoadModelOptions {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('options must be an object', 'options');
  const o = options as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!['device', 'dtype', 'onProgress'].includes(key)) throw new InvalidArgumentError(`unknown option '${key}'`, key);
  }
  if (o.device !== undefined && (typeof o.device !== 'string' || !DEVICES.includes(o.device)))
    throw new InvalidArgumentError(`device must be one of ${DEVICES.join(', ')}; got ${String(o.device)}`, 'device');
  if (o.dtype !== undefined && (typeof o.dtype !== 'string' || !DTYPES.includes(o.dtype)))
    throw new InvalidArgumentError(`dtype must be one of ${DTYPES.join(', ')}; got ${String(o.dtype)}`, 'dtype');
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function')
    throw new InvalidArgumentError('onProgress must be a function', 'onProgress');
  return o as LoadModelOptions;
}

/** Loads a Hugging Face checkpoint directory (config.json + safetensors). */
export async function loadModel(dir: string, options?: LoadModelOptions): Promise<Model> {
  if (typeof dir !== 'string' || dir.length === 0) throw new InvalidArgumentError('dir must be a non-empty string', 'dir');
  const o = checkOptions(options);
  const b = native();
  let device: ModelDevice;
  if (o.device === undefined || o.device === 'auto') device = b.buildInfo().cudaAvailable ? 'cuda' : 'cpu';
  else device = o.device;
  const dtype = o.dtype ?? 'auto';
  const cb = o.onProgress;
  // Native progress arrives through a queue that may still deliver after the load resolved:
  // drop those, and always finish with { fraction: 1, phase: 'done' } before returning.
  let open = true;
  let last = 0;
  const relay = cb
    ? (fraction: number, phase: string) => {
        if (!open || fraction < last || phase === 'done') return;
        last = fraction;
        cb({ fraction, phase });
      }
    : undefined;
  let handle: NativeModel;
  try {
    handle = await b.loadModel(dir, { device, dtype }, relay);
  } finally {
    open = false;
  }
  const model = new Model(handle, dtype);
  cb?.({ fraction: 1, phase: 'done' });
  return model;
}
