/**
 * Library results -> OpenAI response objects (chat.completion, chat.completion.chunk,
 * text_completion), usage and log-probabilities.
 */
import type { GenerationEvent, GenerationResult } from '../generation/index.js';
import type { Tokenizer } from '../input/index.js';

export type FinishReasonOut = 'stop' | 'length' | null;

export function finishReason(r: GenerationResult): FinishReasonOut {
  return r.finishReason === 'length' ? 'length' : 'stop';
}

export function usage(r: GenerationResult) {
  return { prompt_tokens: r.promptTokens, completion_tokens: r.generatedTokens, total_tokens: r.promptTokens + r.generatedTokens };
}

function tokenText(tok: Tokenizer | undefined, id: number): string {
  return tok ? tok.decode([id], { skipSpecialTokens: false }) : String(id);
}

function bytes(s: string): number[] {
  return [...Buffer.from(s, 'utf8')];
}

/** chat `logprobs.content` entries for a list of events. */
export function chatLogprobs(events: readonly GenerationEvent[], tok: Tokenizer | undefined) {
  return {
    content: events.map((e) => {
      const t = tokenText(tok, e.token);
      return {
        token: t,
        logprob: e.logprob ?? 0,
        bytes: bytes(t),
        top_logprobs: (e.topLogprobs ?? []).map((a) => {
          const at = tokenText(tok, a.token);
          return { token: at, logprob: a.logprob, bytes: bytes(at) };
        }),
      };
    }),
  };
}

/** legacy completions `logprobs` object. */
export function completionLogprobs(events: readonly GenerationEvent[], tok: Tokenizer | undefined, offset0 = 0) {
  let offset = offset0;
  const tokens: string[] = [];
  const token_logprobs: number[] = [];
  const top_logprobs: Array<Record<string, number>> = [];
  const text_offset: number[] = [];
  for (const e of events) {
    const t = tokenText(tok, e.token);
    tokens.push(t);
    token_logprobs.push(e.logprob ?? 0);
    const top: Record<string, number> = {};
    for (const a of e.topLogprobs ?? []) top[tokenText(tok, a.token)] = a.logprob;
    top_logprobs.push(top);
    text_offset.push(offset);
    offset += e.text.length;
  }
  return { tokens, token_logprobs, top_logprobs, text_offset };
}
