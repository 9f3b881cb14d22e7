/**
 * What a quantized checkpoint holds, decided before any data is read: which tensors become
 * MLX-quantized layers and at which (bits, group size), which are cast to the checkpoint dtype,
 * which are dropped, and the `quantization` config block. It follows mlx-lm's conversion:
 * every Linear / Embedding weight whose input dimension divides the group size is quantized
 * (2-D `*.weight` tensors other than norms), floating tensors are cast to config.json's
 * `torch_dtype` (or `dtype`), a tied `lm_head.weight` and rotary `inv_freq` buffers are dropped,
 * and mixed recipes (mlx-lm's `mixed_2_6`, `mixed_3_4`, `mixed_3_6`, `mixed_4_6`) or explicit
 * rules record per-module overrides.
 */
import { InvalidArgumentError, UnsupportedError } from '../errors.js';
import { isFloatDType, type FloatFileDType } from './dtype.js';

export type MixedRecipe = 'mixed_2_6' | 'mixed_3_4' | 'mixed_3_6' | 'mixed_4_6';
export const MIXED_RECIPES: readonly MixedRecipe[] = ['mixed_2_6', 'mixed_3_4', 'mixed_3_6', 'mixed_4_6'];

/** A per-module override: modules whose path contains `match` get these settings (first rule wins). */
export interface QuantRule {
  readonly match: string;
  /** false keeps the module in floating point. */
  readonly bits: number | false;
  readonly groupSize?: number;
}

export interface LayerSpec {
  readonly bits: number;
  readonly groupSize: number;
}

export interface InputTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly nbytes: number;
}

export type TensorAction =
  | { readonly kind: 'quantize'; readonly module: string; readonly spec: LayerSpec; readonly dtype: FloatFileDType }
  | { readonly kind: 'cast'; readonly dtype: FloatFileDType }
  | { readonly kind: 'copy' }
  | { readonly kind: 'drop'; readonly reason: string };

export interface PlannedTensor {
  readonly input: InputTensor;
  readonly action: TensorAction;
}

export interface OutputTensor {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  readonly nbytes: number;
  /** Index into Plan.tensors of the input it comes from. */
  readonly source: number;
  readonly part: 'weight' | 'scales' | 'biases' | 'whole';
}

export interface Plan {
  readonly tensors: readonly PlannedTensor[];
  readonly outputs: readonly OutputTensor[];
  /** The `quantization` (and `quantization_config`) block of the new config.json. */
  readonly quantization: Record<string, unknown>;
}

export interface PlanOptions {
  readonly bits: number;
  readonly groupSize: number;
  readonly mixed?: MixedRecipe | readonly QuantRule[];
  /** Target dtype of floating tensors and scales (null = keep each tensor's own). */
  readonly dtype: FloatFileDType | null;
  readonly tieWordEmbeddings: boolean;
  readonly numLayers: number;
}

export const SUPPORTED_BITS: readonly number[] = [2, 3, 4, 5, 6, 8];
export const SUPPORTED_GROUP_SIZES: readonly number[] = [32, 64, 128];

export function checkSpec(bits: unknown, groupSize: unknown, field: string): void {
  if (typeof bits !== 'number' || !SUPPORTED_BITS.includes(bits))
    throw new InvalidArgumentError(`${field}: bits must be one of ${SUPPORTED_BITS.join(', ')}, got ${String(bits)}`, field);
  if (typeof groupSize !== 'number' || !SUPPORTED_GROUP_SIZES.includes(groupSize))
    throw new InvalidArgumentError(`${field}: group size must be one of ${SUPPORTED_GROUP_SIZES.join(', ')}, got ${String(groupSize)}`, field);
}

/** The target dtype named by config.json (`torch_dtype`, transformers >= 5 `dtype`), if it is a float type we write. */
export function configDType(raw: Record<string, unknown>): FloatFileDType | null {
  const v = raw['torch_dtype'] ?? raw['dtype'];
  if (v === 'float32') return 'F32';
  if (v === 'float16') return 'F16';
  if (v === 'bfloat16') return 'BF16';
  return null;
}

function isQuantizable(t: InputTensor): boolean {
  if (!t.name.endsWith('.weight') || t.shape.length !== 2 || !isFloatDType(t.dtype)) return false;
  const module = t.name.slice(0, -'.weight'.length);
  const leaf = module.split('.').pop() ?? '';
  return !leaf.includes('norm');
}

/** mlx-lm's mixed predicate: more bits for v_proj / down_proj of the first and last eighth and every third layer, and lm_head. */
function mixedSpec(recipe: MixedRecipe, module: string, groupSize: number, numLayers: number, layerLocation: number): LayerSpec {
  const [low, high] = recipe === 'mixed_2_6' ? [2, 6] : recipe === 'mixed_3_4' ? [3, 4] : recipe === 'mixed_3_6' ? [3, 6] : [4, 6];
  const parts = module.split('.');
  const index = parts.length > layerLocation ? Number.parseInt(parts[layerLocation]!, 10) || 0 : 0;
  const eighth = Math.floor(numLayers / 8);
  const useMoreBits = index < eighth || index >= Math.floor((7 * numLayers) / 8) || (index - eighth) % 3 === 2;
  if ((module.includes('v_proj') || module.includes('v_a_proj') || module.includes('v_b_proj')) && useMoreBits) return { bits: high, groupSize };
  if (module.includes('down_proj') && useMoreBits) return { bits: high, groupSize };
  if (module.includes('lm_head')) return { bits: high, groupSize };
  return { bits: low, groupSize };
}

export function makePlan(inputs: readonly InputTensor[], opts: PlanOptions): Plan {
  checkSpec(opts.bits, opts.groupSize, 'bits');
  const recipe = typeof opts.mixed === 'string' ? opts.mixed : undefined;
  const rules = Array.isArray(opts.mixed) ? (opts.mixed as readonly QuantRule[]) : [];
  if (recipe !== undefined && !MIXED_RECIPES.includes(recipe))
    throw new InvalidArgumentError(`mixed must be one of ${MIXED_RECIPES.join(', ')} or a list of rules, got ${String(recipe)}`, 'mixed');
  for (const r of rules) {
    if (typeof r.match !== 'string' || r.match.length === 0) throw new InvalidArgumentError('each mixed rule needs a non-empty `match`', 'mixed');
    if (r.bits !== false) checkSpec(r.bits, r.groupSize ?? opts.groupSize, `mixed[${r.match}]`);
  }
  let layerLocation = 0;
  if (recipe) {
    const down = inputs.find((t) => t.name.includes('down_proj'));
    if (!down) throw new UnsupportedError(`mixed recipe ${recipe} needs a model with down_proj layers`, 'mixed');
    layerLocation = Math.max(0, down.name.split('.').findIndex((p) => /^\d+$/.test(p)));
  }

  const quantization: Record<string, unknown> = { group_size: opts.groupSize, bits: opts.bits, mode: 'affine' };
  const tensors: PlannedTensor[] = [];
  for (const t of [...inputs].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    let action: TensorAction;
    if (t.name.endsWith('.rotary_emb.inv_freq')) {
      action = { kind: 'drop', reason: 'rotary buffer' };
    } else if (t.name === 'lm_head.weight' && opts.tieWordEmbeddings) {
      action = { kind: 'drop', reason: 'tied to the embedding' };
    } else if (isQuantizable(t)) {
      const module = t.name.slice(0, -'.weight'.length);
      const dtype = opts.dtype ?? (t.dtype as FloatFileDType);
      const cols = t.shape[1]!;
      let spec: LayerSpec | null = { bits: opts.bits, groupSize: opts.groupSize };
      let record = false;
      if (recipe) {
        spec = mixedSpec(recipe, module, opts.groupSize, opts.numLayers, layerLocation);
        record = true;
      }
      const rule = rules.find((r) => module.includes(r.match));
      if (rule) {
        spec = rule.bits === false ? null : { bits: rule.bits, groupSize: rule.groupSize ?? opts.groupSize };
        record = spec === null || spec.bits !== opts.bits || spec.groupSize !== opts.groupSize;
      }
      if (spec && cols % spec.groupSize !== 0) {
        spec = null;  // as mlx-lm: a layer the group size does not divide stays in floating point, unrecorded
        record = false;
      }
      if (spec) {
        if (record) quantization[module] = { group_size: spec.groupSize, bits: spec.bits, mode: 'affine' };
        action = { kind: 'quantize', module, spec, dtype };
      } else {
        if (record) quantization[module] = false;
        action = { kind: 'cast', dtype };
      }
    } else if (isFloatDType(t.dtype)) {
      action = { kind: 'cast', dtype: opts.dtype ?? t.dtype };
    } else {
      action = { kind: 'copy' };
    }
    tensors.push({ input: t, action });
  }

  const outputs: OutputTensor[] = [];
  tensors.forEach((p, source) => {
    const a = p.action;
    const t = p.input;
    if (a.kind === 'drop') return;
    if (a.kind === 'quantize') {
      const [rows, cols] = [t.shape[0]!, t.shape[1]!];
      const groups = cols / a.spec.groupSize;
      const words = (cols * a.spec.bits) / 32;
      const sbytes = a.dtype === 'F32' ? 4 : 2;
      outputs.push({ name: `${a.module}.weight`, dtype: 'U32', shape: [rows, words], nbytes: rows * words * 4, source, part: 'weight' });
      outputs.push({ name: `${a.module}.scales`, dtype: a.dtype, shape: [rows, groups], nbytes: rows * groups * sbytes, source, part: 'scales' });
      outputs.push({ name: `${a.module}.biases`, dtype: a.dtype, shape: [rows, groups], nbytes: rows * groups * sbytes, source, part: 'biases' });
    } else {
      const dtype = a.kind === 'cast' ? a.dtype : t.dtype;
      const elems = t.shape.reduce((x, y) => x * y, 1);
      const nbytes = a.kind === 'cast' ? elems * (dtype === 'F32' ? 4 : 2) : t.nbytes;
      outputs.push({ name: t.name, dtype, shape: t.shape, nbytes, source, part: 'whole' });
    }
  });
  outputs.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { tensors, outputs, quantization };
}
