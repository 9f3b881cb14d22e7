// A tiny text model for generation tests: a byte-level BPE tokenizer with no merges (256 byte
// tokens + 3 control tokens, so every non-ASCII character spans several tokens), a ChatML
// template, and the native bigram table model over that vocabulary with seeded random logits.
import { native } from '../../lib/native/index.js';
import { ChatTemplate, Tokenizer } from '../../lib/input/index.js';
import type { GenerationTarget } from '../../lib/generation/index.js';

export const VOCAB = 259;
export const EOT = 256;       // <|endoftext|>
export const IM_START = 257;  // <|im_start|>
export const IM_END = 258;    // <|im_end|>

function bytesToUnicode(): string[] {
  const bs: number[] = [];
  for (let i = 33; i <= 126; i++) bs.push(i);
  for (let i = 161; i <= 172; i++) bs.push(i);
  for (let i = 174; i <= 255; i++) bs.push(i);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  }
  const out = new Array<string>(256);
  bs.forEach((b, i) => { out[b] = String.fromCodePoint(cs[i]!); });
  return out;
}

export function byteTokenizer(): Tokenizer {
  const chars = bytesToUnicode();
  const vocab: Record<string, number> = {};
  chars.forEach((c, b) => { vocab[c] = b; });
  const added = (id: number, content: string) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: [added(EOT, '<|endoftext|>'), added(IM_START, '<|im_start|>'), added(IM_END, '<|im_end|>')],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges: [] },
  };
  return new Tokenizer(json, { eos_token: '<|im_end|>', add_bos_token: false });
}

export const CHATML = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** Seeded [VOCAB, VOCAB] logits, N(0, scale) by Box-Muller on a 32-bit LCG. */
export function randomTable(seed: number, scale = 3): Float32Array {
  const t = new Float32Array(VOCAB * VOCAB);
  let s = seed >>> 0;
  const u = () => { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; return (s + 0.5) / 4294967296; };
  for (let i = 0; i < t.length; i++) t[i] = scale * Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * u());
  return t;
}

export interface TinyModel extends GenerationTarget {
  table: Float32Array;
}

export function tinyModel(options: { seed?: number; delayMs?: number; table?: Float32Array; stopIds?: number[] } = {}): TinyModel {
  const table = options.table ?? randomTable(options.seed ?? 1);
  const handle = native().createTableModel(table, VOCAB, options.delayMs ?? 0);
  return {
    nativeHandle: handle,
    vocabSize: VOCAB,
    tokenizer: byteTokenizer(),
    chatTemplate: new ChatTemplate(CHATML),
    generationConfig: { eosTokenIds: options.stopIds ?? [], sampling: { temperature: 0 } },
    table,
  };
}

/** The bigram model's greedy continuation, computed in JS from the table (lowest id on ties). */
export function tableGreedy(table: Float32Array, last: number, n: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    let best = 0;
    for (let j = 1; j < VOCAB; j++) if (table[last * VOCAB + j]! > table[last * VOCAB + best]!) best = j;
    out.push(best);
    last = best;
  }
  return out;
}
