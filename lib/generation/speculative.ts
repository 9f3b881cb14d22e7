/**
 * Speculative generation: a small draft model proposes `draftTokens` tokens one at a time, the
 * target model scores them all in one forward, and the standard acceptance rule keeps a prefix
 * of them plus one token of the target's own. Every token comes from the target's distribution
 * (for greedy decoding: exactly the tokens plain generate() gives); the draft only changes how
 * many target forwards it takes. Both models keep their KV caches in sessions, rolled back past
 * rejected tokens, so models with sliding-window layers are refused.
 */
import type { NativeSample, NativeSampler } from '../../types/native/generation.js';
import { InvalidArgumentError, UnsupportedError } from '../errors.js';
import { Model } from '../models/model.js';
import { native } from '../native/index.js';
import { Session } from '../state/index.js';
import { prepareGeneration, runGeneration, type Generation, type GenerationInput, type GenerationTarget } from './generate.js';
import type { GenerateOptions } from './options.js';

/** A language model for speculative generation: a generation target with its loaded Model. */
export type SpeculativeTarget = GenerationTarget & { readonly model: Model };

export interface SpeculativeOptions extends GenerateOptions {
  /** Tokens the draft proposes per target forward. Integer in [1, 32]; default 4. */
  draftTokens?: number;
}

/** What the draft did, as `Generation.result` reports it under `speculative`. */
export interface SpeculativeStats {
  /** Target forwards after the prompt. */
  rounds: number;
  /** Tokens the draft proposed, and how many of them the target kept. */
  drafted: number;
  accepted: number;
}

function argmaxOf(row: ArrayLike<number>, off: number, n: number): number {
  let b = 0;
  for (let i = 1; i < n; i++) if (row[off + i]! > row[off + b]!) b = i;
  return b;
}

/** xorshift128+ in doubles: the acceptance draws (seeded when the options carry a seed). */
export function uniform(seed: number | undefined): () => number {
  let a = BigInt.asUintN(64, BigInt(seed ?? Math.floor(Math.random() * 2 ** 52)) * 0x9e3779b97f4a7c15n + 1n);
  let b = BigInt.asUintN(64, a ^ 0xd1b54a32d192ed03n);
  return () => {
    let x = a;
    const y = b;
    a = y;
    x = BigInt.asUintN(64, x ^ (x << 23n));
    b = x ^ y ^ (x >> 17n) ^ (y >> 26n);
    return Number(BigInt.asUintN(53, b + y)) / 2 ** 53;
  };
}

/** Index drawn from weights w (not necessarily normalised, non-negative). */
function draw(w: ArrayLike<number>, u: number): number {
  let total = 0;
  for (let i = 0; i < w.length; i++) total += w[i]!;
  let r = u * total;
  let last = 0;
  for (let i = 0; i < w.length; i++) {
    if (w[i]! <= 0) continue;
    last = i;
    r -= w[i]!;
    if (r < 0) return i;
  }
  return last;
}

/**
 * The acceptance rule for one proposed token x drawn from q: keep it with probability
 * min(1, p(x) / q(x)) (returns -1), else draw from max(0, p - q) renormalised (returns that
 * token). Whatever q is, the token that results is distributed as p. `u` gives U[0, 1) draws.
 */
export function acceptOrResample(p: ArrayLike<number>, q: ArrayLike<number>, x: number, u: () => number): number {
  if (u() * q[x]! < p[x]!) return -1;
  const residual = new Float64Array(p.length);
  let any = false;
  for (let j = 0; j < p.length; j++) {
    residual[j] = Math.max(0, p[j]! - q[j]!);
    if (residual[j]! > 0) any = true;
  }
  return any ? draw(residual, u()) : argmaxOf(p, 0, p.length);
}

/**
 * The token's log-probability, and the `top` most likely tokens', from the target's logits after
 * bias and penalties (`NativeSampler.process`): what generate() reports, log-softmax before
 * temperature and filters. Ties rank to the lower id.
 */
export function scoreToken(processed: Float32Array, token: number, top: number): NativeSample {
  let max = -Infinity;
  for (let i = 0; i < processed.length; i++) if (processed[i]! > max) max = processed[i]!;
  let sum = 0;
  for (let i = 0; i < processed.length; i++) sum += Math.exp(processed[i]! - max);
  const lse = max + Math.log(sum);
  const s: NativeSample = { token, logprob: processed[token]! - lse };
  if (top > 0) {
    const best: number[] = [];  // ids, most likely first
    for (let i = 0; i < processed.length; i++) {
      const v = processed[i]!;
      if (best.length === top && v <= processed[best[top - 1]!]!) continue;
      let at = best.length;
      while (at > 0 && v > processed[best[at - 1]!]!) at--;
      best.splice(at, 0, i);
      if (best.length > top) best.pop();
    }
    s.topTokens = Int32Array.from(best);
    s.topLogprobs = Float32Array.from(best, (i) => processed[i]! - lse);
  }
  return s;
}

/**
 * Generates from `target` with `draft` proposing tokens. Same input and options as generate()
 * (plus `draftTokens`); log-probabilities are the target's, as generate() reports them.
 * `result.speculative` says how many proposals the target kept.
 */
export function speculativeGenerate(
  target: SpeculativeTarget, draft: { readonly model: Model }, input: GenerationInput, options?: SpeculativeOptions,
): Generation & { readonly result: Promise<Awaited<Generation['result']> & { speculative: SpeculativeStats }> } {
  if (!target || !(target.model instanceof Model)) throw new InvalidArgumentError('target must be a LanguageModel', 'target');
  if (!draft || !(draft.model instanceof Model)) throw new InvalidArgumentError('draft must be a LanguageModel or { model }', 'draft');
  const { draftTokens: k0, ...rest } = options ?? {};
  const k = k0 ?? 4;
  if (typeof k !== 'number' || !Number.isInteger(k) || k < 1 || k > 32) throw new InvalidArgumentError(`draftTokens must be an integer in [1, 32]; got ${String(k)}`, 'draftTokens');
  const p = prepareGeneration(target, input, rest);
  const vocab = target.vocabSize;
  if (draft.model.config.vocabSize !== vocab)
    throw new InvalidArgumentError(`the draft's vocabulary (${draft.model.config.vocabSize}) differs from the target's (${vocab})`, 'draft');
  for (const [m, field] of [[target.model, 'target'], [draft.model, 'draft']] as const) {
    if (m.config.layerTypes.some((t) => t === 'sliding_attention'))
      throw new UnsupportedError(`the ${field} model has sliding-window layers, whose caches cannot roll back rejected tokens`, field);
  }
  const cap = p.prompt.length + p.maxTokens + k + 1;
  const stats: SpeculativeStats = { rounds: 0, drafted: 0, accepted: 0 };
  let tSession: Session | undefined, dSession: Session | undefined;
  let tSampler: NativeSampler | undefined;
  const history: number[] = [...p.prompt];  // prompt + every token handed out
  let dLen = 0;                              // tokens of `history` the draft's cache holds
  const queue: NativeSample[] = [];
  const u = uniform(p.options.sampling.seed);
  const sampling = { ...p.options.sampling, logprobs: false };
  const newSampler = () => new (native().Sampler)(sampling, vocab);
  const logprobs = p.options.sampling.logprobs, top = p.options.sampling.topLogprobs ?? 0;

  // Hands out `token`, drawn from the target's logits `row` (scored before the token joins the
  // penalty window, as the sampler saw them).
  const give = (token: number, row: Float32Array): NativeSample => {
    const s = logprobs ? scoreToken(tSampler!.process(row), token, top) : { token, logprob: 0 };
    history.push(token);
    tSampler!.accept(Int32Array.of(token));
    return s;
  };

  // One round after `last` (the newest token, in neither cache): draft m tokens, score them.
  const round = async (m: number): Promise<void> => {
    stats.rounds++;
    // The draft catches up on the tokens it has not seen, then proposes m tokens.
    const dSampler = newSampler();
    dSampler.accept(Int32Array.from(history));
    const xs: number[] = [];
    const qs: Float32Array[] = [];
    let feed = history.slice(dLen);
    for (let i = 0; i < m; i++) {
      const logits = await dSession!.forward(feed);
      dLen += feed.length;
      const q = dSampler.distribution(logits);
      const x = draw(q, u());
      xs.push(x);
      qs.push(q);
      dSampler.accept(Int32Array.of(x));
      feed = [x];
    }
    stats.drafted += m;
    const base = history.length;  // the target's cache holds base - 1 tokens
    const rows = await tSession!.forward([history[base - 1]!, ...xs], { allRows: true });
    let accepted = 0;
    for (let i = 0; i < m; i++) {
      const row = rows.subarray(i * vocab, (i + 1) * vocab);
      const y = acceptOrResample(tSampler!.distribution(row), qs[i]!, xs[i]!, u);
      if (y < 0) {
        accepted++;
        queue.push(give(xs[i]!, row));
        continue;
      }
      queue.push(give(y, row));
      break;
    }
    if (accepted === m) {
      const row = rows.subarray(m * vocab, (m + 1) * vocab);
      queue.push(give(draw(tSampler!.distribution(row), u()), row));
    }
    stats.accepted += accepted;
    // Keep what was kept: the target's cache holds everything but the newest token.
    tSession!.truncate(history.length - 1);
    if (dLen > history.length - 1) {
      dLen = history.length - 1;
      dSession!.truncate(dLen);
    }
  };

  const gen = runGeneration(target, p, {
    first: async () => {
      tSession = new Session(target.model, { maxTokens: cap });
      dSession = new Session(draft.model, { maxTokens: cap });
      tSampler = newSampler();
      tSampler.accept(Int32Array.from(p.prompt));
      const logits = await tSession.forward(p.prompt);
      return give(draw(tSampler.distribution(logits), u()), logits);
    },
    next: async () => {
      if (queue.length === 0) {
        const left = p.maxTokens - (history.length - p.prompt.length);
        await round(Math.max(1, Math.min(k, left - 1)));
      }
      return queue.shift()!;
    },
    dispose: () => {
      tSession?.dispose();
      dSession?.dispose();
    },
  });
  const result = gen.result.then((r) => ({ ...r, speculative: { ...stats } }));
  result.catch(() => {});
  Object.defineProperty(gen, 'result', { value: result });
  return gen as Generation & { readonly result: typeof result };
}
