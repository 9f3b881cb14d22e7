/**
 * @mlx-bun/inference/quantize — writes an MLX-format affine-quantized checkpoint from a Hugging
 * Face (or MLX float) checkpoint, the way `mlx_lm.convert -q` does: same tensor names (`*.weight`
 * packed uint32, `*.scales`, `*.biases`), dtypes, config keys (`quantization` and
 * `quantization_config`, per-module overrides for mixed precision) and the tokenizer / template
 * files copied beside them, so mlx-lm and this library both load the result as it is.
 *
 * The output directory appears atomically: everything is written into a hidden temporary
 * directory beside it and renamed at the end; on an error or an abort (AbortSignal; the CLI maps
 * Ctrl-C to it) the temporary directory is removed and nothing is left at `outDir`.
 */
import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, open, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';

import { inspectCheckpoint, readTensor } from '../artifacts/index.js';
import { AbortError, InvalidArgumentError, IoError, UnsupportedError } from '../errors.js';
import { readOptionalJson } from '../input/files.js';
import { native } from '../native/index.js';
import { convertFloat, nativeFloatName, type FloatFileDType } from './dtype.js';
import { configDType, makePlan, MIXED_RECIPES, type MixedRecipe, type OutputTensor, type Plan, type QuantRule } from './plan.js';
import { SafetensorsStream } from './safetensors_write.js';

export type { MixedRecipe, QuantRule } from './plan.js';
export { MIXED_RECIPES } from './plan.js';

export interface QuantizeProgress {
  /** 'quantize' while tensors are processed, 'done' once the directory is in place. */
  readonly phase: 'quantize' | 'done';
  /** Input bytes processed so far and in all. */
  readonly done: number;
  readonly total: number;
  /** The tensor just finished. */
  readonly tensor?: string;
}

export interface QuantizeOptions {
  /** Bits per weight: 2, 3, 4, 5, 6 or 8. Default 4. */
  readonly bits?: number;
  /** Elements sharing one scale and bias: 32, 64 or 128. Default 64. */
  readonly groupSize?: number;
  /** An mlx-lm mixed recipe, or per-module rules (e.g. 8-bit `embed_tokens` and `lm_head`). */
  readonly mixed?: MixedRecipe | readonly QuantRule[];
  /** dtype of floating tensors and of scales/biases; default config.json's torch_dtype, else each tensor's own. */
  readonly dtype?: 'float32' | 'float16' | 'bfloat16';
  readonly onProgress?: (p: QuantizeProgress) => void;
  readonly signal?: AbortSignal;
}

export interface QuantizeResult {
  readonly outDir: string;
  readonly quantizedLayers: number;
  readonly tensors: number;
  readonly bytes: number;
  /** Bits per parameter over the quantized layers, scales and biases included. */
  readonly bitsPerWeight: number;
}

const MAX_SHARD_BYTES = 5 * 2 ** 30;
// Side files carried over, as mlx-lm downloads and saves them: tokenizer and template files,
// generation config, custom code, license and card. Weights in other formats are not.
const SIDE_FILE = /\.(json|jsonl|jinja|txt|tiktoken|model|py|md)$|^LICENSE/;

function shardsOf(outputs: readonly OutputTensor[]): OutputTensor[][] {
  const shards: OutputTensor[][] = [[]];
  let size = 0;
  for (const t of outputs) {
    if (size + t.nbytes > MAX_SHARD_BYTES && shards[shards.length - 1]!.length > 0) {
      shards.push([]);
      size = 0;
    }
    shards[shards.length - 1]!.push(t);
    size += t.nbytes;
  }
  return shards;
}

function sortKeys(o: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.keys(o).sort().map((k) => [k, o[k]]));
}

function checkAbort(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new AbortError('quantization was aborted');
}

export async function quantizeCheckpoint(inDir: string, outDir: string, options: QuantizeOptions = {}): Promise<QuantizeResult> {
  if (typeof inDir !== 'string' || inDir.length === 0) throw new InvalidArgumentError('inDir must be a non-empty path', 'inDir');
  if (typeof outDir !== 'string' || outDir.length === 0) throw new InvalidArgumentError('outDir must be a non-empty path', 'outDir');
  const bits = options.bits ?? 4;
  const groupSize = options.groupSize ?? 64;
  if (options.mixed !== undefined && typeof options.mixed === 'string' && !MIXED_RECIPES.includes(options.mixed))
    throw new InvalidArgumentError(`mixed must be one of ${MIXED_RECIPES.join(', ')} or a list of rules`, 'mixed');
  const dtypeOpt = options.dtype;
  if (dtypeOpt !== undefined && dtypeOpt !== 'float32' && dtypeOpt !== 'float16' && dtypeOpt !== 'bfloat16')
    throw new InvalidArgumentError('dtype must be float32, float16 or bfloat16', 'dtype');
  checkAbort(options.signal);

  const target = resolve(outDir);
  if (await stat(target).then(() => true, () => false)) throw new InvalidArgumentError(`${outDir} already exists; choose a new output directory`, 'outDir');
  const rawConfig = await readOptionalJson(inDir, 'config.json');
  if (!rawConfig) throw new IoError(`${join(inDir, 'config.json')}: no such file`, 'config.json');
  if (rawConfig['quantization'] !== undefined || rawConfig['quantization_config'] !== undefined)
    throw new UnsupportedError(`${inDir} is already quantized`, 'inDir');
  const info = await inspectCheckpoint(inDir);

  const dtype: FloatFileDType | null =
    dtypeOpt === 'float32' ? 'F32' : dtypeOpt === 'float16' ? 'F16' : dtypeOpt === 'bfloat16' ? 'BF16' : configDType(rawConfig);
  const plan: Plan = makePlan(info.tensors, {
    bits, groupSize, mixed: options.mixed, dtype,
    tieWordEmbeddings: info.config.tieWordEmbeddings, numLayers: info.config.numLayers,
  });

  await mkdir(dirname(target), { recursive: true });
  const tmp = join(dirname(target), `.${basename(target)}.quantize-tmp-${process.pid}-${randomBytes(4).toString('hex')}`);
  await mkdir(tmp);
  try {
    const result = await writeAll(inDir, tmp, plan, rawConfig, options);
    checkAbort(options.signal);
    await rename(tmp, target);
    options.onProgress?.({ phase: 'done', done: result.total, total: result.total });
    return { ...result.summary, outDir: target };
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    if (e instanceof Error && 'code' in e && typeof (e as NodeJS.ErrnoException).syscall === 'string')
      throw new IoError(`writing ${outDir}: ${e.message}`, 'outDir');
    throw e;
  }
}

async function writeAll(inDir: string, tmp: string, plan: Plan, rawConfig: Record<string, unknown>, options: QuantizeOptions) {
  const total = plan.tensors.reduce((s, t) => s + (t.action.kind === 'drop' ? 0 : t.input.nbytes), 0);
  let done = 0;
  const shards = shardsOf(plan.outputs);
  const shardName = (i: number): string =>
    shards.length === 1 ? 'model.safetensors' : `model-${String(i + 1).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.safetensors`;
  const weightMap: Record<string, string> = {};
  let quantizedLayers = 0;
  let quantBytes = 0;
  let quantParams = 0;
  let bytes = 0;

  for (const [i, shard] of shards.entries()) {
    const file = await open(join(tmp, shardName(i)), 'w');
    try {
      const stream = new SafetensorsStream(file, shard);
      await stream.begin({ format: 'mlx' });
      let pending: { source: number; parts: Record<string, Uint8Array> } | null = null;
      for (const out of shard) {
        checkAbort(options.signal);
        const planned = plan.tensors[out.source]!;
        const a = planned.action;
        let data: Uint8Array;
        if (a.kind === 'quantize') {
          if (!pending || pending.source !== out.source) {
            const raw = await readTensor(inDir, planned.input.name);
            const src = raw.dtype as FloatFileDType;
            const bytes = raw.data.byteOffset % 4 === 0 ? raw.data : new Uint8Array(raw.data);
            const values = src === 'F32'
              ? new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4)
              : new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2);
            const q = await native().quantizeAffine(
              { data: values, dtype: nativeFloatName(src), rows: planned.input.shape[0]!, cols: planned.input.shape[1]! },
              a.spec.bits, a.spec.groupSize, nativeFloatName(a.dtype));
            const asBytes = (v: Uint32Array | Float32Array | Uint16Array): Uint8Array => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
            pending = { source: out.source, parts: { weight: asBytes(q.packed), scales: asBytes(q.scales), biases: asBytes(q.biases) } };
            quantizedLayers++;
            quantParams += planned.input.shape[0]! * planned.input.shape[1]!;
            done += planned.input.nbytes;
            options.onProgress?.({ phase: 'quantize', done, total, tensor: planned.input.name });
          }
          data = pending.parts[out.part]!;
          quantBytes += data.byteLength;
        } else {
          const raw = await readTensor(inDir, planned.input.name);
          data = a.kind === 'cast' ? convertFloat(raw.data, raw.dtype as FloatFileDType, a.dtype) : raw.data;
          done += planned.input.nbytes;
          options.onProgress?.({ phase: 'quantize', done, total, tensor: planned.input.name });
        }
        await stream.append(out.name, data);
        weightMap[out.name] = shardName(i);
        bytes += data.byteLength;
      }
    } finally {
      await file.close();
    }
  }

  const index = { metadata: { total_size: bytes }, weight_map: sortKeys(weightMap) };
  await writeFile(join(tmp, 'model.safetensors.index.json'), JSON.stringify(index, null, 4));
  const config: Record<string, unknown> = { ...rawConfig };
  delete config['_name_or_path'];
  config['quantization'] = plan.quantization;
  config['quantization_config'] = plan.quantization;
  await writeFile(join(tmp, 'config.json'), JSON.stringify(sortKeys(config), null, 4));

  for (const entry of await readdir(inDir, { withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const name = entry.name;
    if (name === 'config.json' || name.endsWith('.index.json') || !SIDE_FILE.test(name)) continue;
    await copyFile(join(inDir, name), join(tmp, name));
  }
  return {
    total,
    summary: {
      quantizedLayers,
      tensors: plan.outputs.length,
      bytes,
      bitsPerWeight: quantParams > 0 ? (quantBytes * 8) / quantParams : 0,
    },
  };
}
