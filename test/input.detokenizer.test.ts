// Streaming detokenizer: concatenated chunks equal the one-shot decode, and no chunk holds part of
// a character (emoji and CJK characters span several byte tokens in these vocabularies).
import { describe, expect, it } from 'vitest';

import { loadTokenizer, StreamingDetokenizer, type Tokenizer } from '../lib/input/index.js';
import { CORPUS, TOKENIZERS, type TokenizerName } from './helpers/tokenizers.js';

function hasLoneSurrogate(s: string): boolean {
  return /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}

function stream(tok: Tokenizer, ids: number[], skipSpecialTokens = false): string[] {
  const d = new StreamingDetokenizer(tok, { skipSpecialTokens });
  const chunks = ids.map((id) => d.push(id));
  chunks.push(d.flush());
  expect(d.text).toBe(chunks.join(''));
  return chunks;
}

describe.each(Object.keys(TOKENIZERS) as TokenizerName[])('streaming detokenizer %s', (name) => {
  let tok: Tokenizer;
  it('loads', async () => {
    tok = await loadTokenizer(TOKENIZERS[name]);
  });

  it('chunks concatenate to the one-shot decode and never split a character', () => {
    let split = 0;
    for (const text of CORPUS) {
      const ids = tok.encode(text);
      const chunks = stream(tok, ids);
      expect(chunks.join(''), JSON.stringify(text)).toBe(tok.decode(ids));
      for (const c of chunks) {
        expect(c.includes('\uFFFD'), JSON.stringify(c)).toBe(false);
        expect(hasLoneSurrogate(c)).toBe(false);
      }
      // Emoji/CJK lines produce ids whose text is held back until the character completes.
      if (chunks.slice(0, -1).some((c) => c === '')) split++;
      const skipped = stream(tok, ids, true);
      expect(skipped.join('')).toBe(tok.decode(ids, { skipSpecialTokens: true }));
    }
    expect(split).toBeGreaterThan(0);
  });

  it('arbitrary id sequences (invalid UTF-8 included) still concatenate to the one-shot decode', () => {
    let seed = 99;
    const n = tok.vocabSize;
    for (let r = 0; r < 40; r++) {
      const ids: number[] = [];
      for (let i = 0; i < 16; i++) {
        seed = (seed * 1103515245 + 12345) % 2147483648;
        ids.push(seed % n);
      }
      expect(stream(tok, ids).join('')).toBe(tok.decode(ids));
    }
  });
});
