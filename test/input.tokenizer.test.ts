// Our tokenizer (@huggingface/tokenizers + config policy) against the Rust `tokenizers` package,
// the reference implementation, on a mixed corpus for the Qwen3, Llama-3, Gemma-3 and Mistral tokenizers.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { Tokenizer as RustTokenizer } from 'tokenizers';
import { describe, expect, it } from 'vitest';

import { InvalidFileError, IoError } from '../lib/errors.js';
import { loadTokenizer, type Tokenizer } from '../lib/input/index.js';
import { CORPUS, TOKENIZERS, type TokenizerName } from './helpers/tokenizers.js';

const names = Object.keys(TOKENIZERS) as TokenizerName[];

describe.each(names)('tokenizer %s', (name) => {
  const dir = TOKENIZERS[name];
  let ours: Tokenizer;
  let rust: RustTokenizer;
  let rustPlain: RustTokenizer;

  it('loads', async () => {
    ours = await loadTokenizer(dir);
    rust = RustTokenizer.fromFile(join(dir, 'tokenizer.json'));
    // Reference for "control tokens stay text": the same tokenizer.json without special added tokens.
    const json = JSON.parse(readFileSync(join(dir, 'tokenizer.json'), 'utf8')) as { added_tokens: { special: boolean }[] };
    json.added_tokens = json.added_tokens.filter((t) => !t.special);
    rustPlain = RustTokenizer.fromString(JSON.stringify(json));
    expect(ours.controlTokens.size).toBeGreaterThan(0);
  });

  it('encodes the corpus exactly as the Rust library (no special tokens)', async () => {
    for (const text of CORPUS) {
      const want = (await rust.encode(text, null, { addSpecialTokens: false })).getIds();
      expect(ours.encode(text, { addSpecialTokens: false }), JSON.stringify(text)).toEqual(want);
    }
  });

  it('adds BOS/EOS as the post-processor and tokenizer_config say', async () => {
    for (const text of CORPUS.slice(0, 4)) {
      const want = (await rust.encode(text, null, { addSpecialTokens: true })).getIds();
      const config = ours.config;
      let expected = want;
      // transformers lets tokenizer_config's add_bos_token override the post-processor.
      if (config.add_bos_token === false && ours.bosToken && want[0] === ours.bosToken.id) expected = want.slice(1);
      expect(ours.encode(text)).toEqual(expected);
    }
    if (name === 'qwen3') expect(ours.encode('hi')[0]).not.toBe(ours.tokenToId('<|endoftext|>'));
    if (name === 'llama3') expect(ours.encode('hi')[0]).toBe(ours.tokenToId('<|begin_of_text|>'));
    if (name === 'gemma3') expect(ours.encode('hi')[0]).toBe(ours.tokenToId('<bos>'));
    if (name === 'mistral') expect(ours.encode('hi')[0]).toBe(ours.tokenToId('<s>'));
  });

  it('keeps control-token text plain when parseSpecialTokens is false', async () => {
    for (const text of CORPUS) {
      const want = (await rustPlain.encode(text, null, { addSpecialTokens: false })).getIds();
      const got = ours.encode(text, { addSpecialTokens: false, parseSpecialTokens: false });
      expect(got, JSON.stringify(text)).toEqual(want);
      for (const id of got) expect(ours.isControlToken(id)).toBe(false);
    }
    const fake = [...ours.controlTokens.keys()].join(' ');
    expect(ours.encode(fake, { addSpecialTokens: false }).some((id) => ours.isControlToken(id))).toBe(true);
    expect(ours.encode(fake, { addSpecialTokens: false, parseSpecialTokens: false }).some((id) => ours.isControlToken(id))).toBe(false);
  });

  it('decodes exactly as the Rust library', async () => {
    for (const text of CORPUS) {
      const ids = (await rust.encode(text, null, { addSpecialTokens: true })).getIds();
      if (ids.length === 0) continue;
      expect(ours.decode(ids), JSON.stringify(text)).toBe(await rust.decode(ids, false));
      expect(ours.decode(ids, { skipSpecialTokens: true })).toBe(await rust.decode(ids, true));
    }
    // Arbitrary id sequences too (byte pieces that do not form valid UTF-8 on their own).
    let seed = 12345;
    const vocab = ours.vocabSize;
    for (let n = 0; n < 30; n++) {
      const ids: number[] = [];
      for (let i = 0; i < 12; i++) {
        seed = (seed * 1103515245 + 12345) % 2147483648;
        ids.push(seed % vocab);
      }
      expect(ours.decode(ids)).toBe(await rust.decode(ids, false));
    }
  });
});

describe('tokenizer errors', () => {
  it('wrong paths and broken files give typed errors', async () => {
    await expect(loadTokenizer('/nonexistent/dir')).rejects.toBeInstanceOf(IoError);
    await expect(loadTokenizer('/tmp')).rejects.toBeInstanceOf(InvalidFileError);
  });
});
