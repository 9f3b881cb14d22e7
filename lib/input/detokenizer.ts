/**
 * Streaming detokenizer: turns token ids arriving one at a time into text chunks such that the
 * concatenation of all chunks (after `flush()`) equals `tokenizer.decode(allIds)` with the same
 * options, and no chunk ends inside a character (bytes of an emoji or a CJK character split
 * across tokens are held back until complete).
 *
 * Each step decodes a short window of recent tokens twice, with and without the new token, and
 * emits the difference: decoders that look at the start of the text (a stripped leading space)
 * treat both decodes alike, and cost per token stays constant instead of growing with length.
 */
import type { DecodeOptions, Tokenizer } from './tokenizer.js';

const REPLACEMENT = '\uFFFD';

export class StreamingDetokenizer {
  readonly #tokenizer: Tokenizer;
  readonly #options: DecodeOptions;
  readonly #ids: number[] = [];
  #prefixOffset = 0;  // window start (tokens already emitted before it)
  #readOffset = 0;    // tokens up to here are reflected in emitted text
  #text = '';         // all text emitted so far

  constructor(tokenizer: Tokenizer, options: DecodeOptions = {}) {
    this.#tokenizer = tokenizer;
    this.#options = options;
  }

  /** Every id pushed so far. */
  get ids(): readonly number[] {
    return this.#ids;
  }

  /** Everything emitted so far (the concatenation of the returned chunks). */
  get text(): string {
    return this.#text;
  }

  /** Adds one token; returns the text it completes (possibly empty). */
  push(id: number): string {
    this.#ids.push(id);
    const prefix = this.#decode(this.#prefixOffset, this.#readOffset);
    const full = this.#decode(this.#prefixOffset, this.#ids.length);
    // Hold back while the window ends in an incomplete character (decoded as U+FFFD) or while
    // the new text does not yet extend what was emitted (a decoder still rewriting the tail).
    if (full.length <= prefix.length || full.endsWith(REPLACEMENT) || !full.startsWith(prefix)) return '';
    const chunk = full.slice(prefix.length);
    this.#prefixOffset = this.#readOffset;
    this.#readOffset = this.#ids.length;
    this.#text += chunk;
    return chunk;
  }

  /** Emits whatever is still held back (a dangling partial character becomes U+FFFD, as in decode()). */
  flush(): string {
    if (this.#readOffset === this.#ids.length) return '';
    const prefix = this.#decode(this.#prefixOffset, this.#readOffset);
    const full = this.#decode(this.#prefixOffset, this.#ids.length);
    let chunk: string;
    if (full.startsWith(prefix)) {
      chunk = full.slice(prefix.length);
    } else {
      // Cannot happen with the decoders we know; fall back to a full decode to stay exact.
      const all = this.#tokenizer.decode(this.#ids, this.#options);
      chunk = all.startsWith(this.#text) ? all.slice(this.#text.length) : '';
    }
    this.#prefixOffset = this.#readOffset = this.#ids.length;
    this.#text += chunk;
    return chunk;
  }

  #decode(from: number, to: number): string {
    return to > from ? this.#tokenizer.decode(this.#ids.slice(from, to), this.#options) : '';
  }
}
