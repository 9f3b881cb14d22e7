/**
 * Grammar-constrained generation (generate() with `grammar`): every step the target's logits
 * come to the host through a Session, tokens the grammar does not allow next are masked out, and
 * the host Sampler draws from the rest under the request's sampling options. The grammar ends by
 * allowing only the stop ids, so a finished grammar ends the generation with 'stop'.
 */
import type { NativeSample, NativeSampler } from '../../types/native/generation.js';
import { InvalidArgumentError, UnsupportedError } from '../errors.js';
import { Model } from '../models/model.js';
import { native } from '../native/index.js';
import { applyMask, GrammarEngine, type GrammarMatcher } from '../sampling/grammar/index.js';
import { Session } from '../state/index.js';
import type { GenerationTarget, PreparedGeneration, TokenSource } from './generate.js';

export function grammarSource(target: GenerationTarget, p: PreparedGeneration): TokenSource {
  const spec = p.options.grammar!;
  const model = (target as { model?: unknown }).model;
  if (!(model instanceof Model)) throw new UnsupportedError('grammar needs a LanguageModel (a loaded checkpoint)', 'grammar');
  if (!target.tokenizer) throw new UnsupportedError('grammar needs the checkpoint\'s tokenizer', 'grammar');
  if (p.stopIds.size === 0) throw new InvalidArgumentError('grammar needs at least one stop token id to end on', 'stopTokenIds');
  const engine = GrammarEngine.for(target.tokenizer, target.vocabSize, [...p.stopIds]);
  let session: Session | undefined;
  let matcher: GrammarMatcher | undefined;
  let sampler: NativeSampler | undefined;
  // The matcher works in its worker while the model runs: after a token is drawn, its accept and
  // the next mask are requested at once and awaited only at the next step.
  let accepted: Promise<boolean> = Promise.resolve(true);
  let nextMask: Promise<Int32Array | null> | undefined;
  let last = -1;
  const step = async (logits: Float32Array): Promise<NativeSample> => {
    if (!(await accepted)) throw new InvalidArgumentError(`grammar: token ${last} was sampled outside the grammar`, 'grammar');
    const mask = await nextMask!;
    if (mask) applyMask(logits, mask);
    const s = sampler!.sample(logits);
    sampler!.accept(Int32Array.of(s.token));
    last = s.token;
    accepted = matcher!.accept(s.token);
    nextMask = matcher!.mask();
    accepted.catch(() => {});
    nextMask.catch(() => {});
    return s;
  };
  return {
    first: async () => {
      matcher = await engine.matcher(spec);
      nextMask = matcher.mask();
      session = new Session(model, { maxTokens: p.prompt.length + p.maxTokens });
      sampler = new (native().Sampler)(p.options.sampling, target.vocabSize);
      sampler.accept(Int32Array.from(p.prompt));
      return step(await session.forward(p.prompt));
    },
    next: async (token) => step(await session!.forward([token])),
    dispose: () => {
      session?.dispose();
      matcher?.dispose();
    },
  };
}
