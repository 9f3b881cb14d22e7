/**
 * The checkpoint's tokenizer: tokenizer.json run by @huggingface/tokenizers, with the special
 * tokens and BOS/EOS policy of tokenizer_config.json.
 *
 * Control tokens (added tokens marked `special`) are matched in text only when the caller says the
 * text is trusted (`parseSpecialTokens`, default true for whole prompts). `encodeSegments` lets
 * the chat template mark which spans came from the template (control tokens parsed) and which came
 * from users (control-token text stays plain text), see chat_template.ts.
 * Decoding never applies `clean_up_tokenization_spaces` unless asked, matching the Rust library.
 */
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';

import { InvalidArgumentError, InvalidFileError } from '../errors.js';
import { assertDirectory, readOptionalJson, tokenText, type JsonObject } from './files.js';

export interface SpecialToken {
  readonly text: string;
  readonly id: number;
}

export interface EncodeOptions {
  /** Add what the post-processor and tokenizer_config's add_bos/eos_token say (BOS, EOS). Default true. */
  addSpecialTokens?: boolean;
  /** Turn control-token text (`<|im_start|>`) into control tokens. Default true; false keeps it plain text. */
  parseSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop control tokens (added tokens marked special). Default false. */
  skipSpecialTokens?: boolean;
  /** transformers' clean-up of spaces before punctuation. Default false (as the Rust library). */
  cleanUpTokenizationSpaces?: boolean;
}

/** A span of text to encode; `trusted` spans may contain control tokens, the others never. */
export interface TextSegment {
  text: string;
  trusted: boolean;
}

interface AddedTokenJson {
  id: number;
  content: string;
  special: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
}

export class Tokenizer {
  readonly bosToken?: SpecialToken;
  readonly eosToken?: SpecialToken;
  readonly padToken?: SpecialToken;
  readonly unkToken?: SpecialToken;
  /** Added tokens marked special (the control tokens), by text. */
  readonly controlTokens: ReadonlyMap<string, number>;
  /** tokenizer_config.json as read (empty object when absent). */
  readonly config: Readonly<JsonObject>;
  /**
   * Ids tokenizer.json's post-processor puts after a single sequence (transformers'
   * `add_special_tokens=True`), e.g. the terminator an embedding model pools at. encode() adds
   * them only where they are the EOS tokenizer_config asks for; embeddings append them.
   */
  readonly sequenceSuffix: readonly number[];

  readonly #json: JsonObject;
  readonly #full: HfTokenizer;
  readonly #addedById: Map<number, AddedTokenJson>;
  readonly #addBos: boolean;
  readonly #addEos: boolean;
  readonly #plain = new Map<string, HfTokenizer>();

  /** Builds from the parsed tokenizer.json and tokenizer_config.json objects. */
  constructor(tokenizerJson: JsonObject, config: JsonObject = {}) {
    if (!Array.isArray(tokenizerJson.added_tokens) || typeof tokenizerJson.model !== 'object') {
      throw new InvalidFileError('tokenizer.json: missing "model" or "added_tokens"', 'tokenizer.json');
    }
    this.#json = tokenizerJson;
    this.config = config;
    try {
      this.#full = new HfTokenizer(tokenizerJson, config);
    } catch (e) {
      throw new InvalidFileError(`tokenizer.json: ${(e as Error).message}`, 'tokenizer.json');
    }
    this.#addedById = new Map();
    const control = new Map<string, number>();
    for (const t of tokenizerJson.added_tokens as AddedTokenJson[]) {
      this.#addedById.set(t.id, t);
      if (t.special) control.set(t.content, t.id);
    }
    this.controlTokens = control;
    const special = (key: string): SpecialToken | undefined => {
      const text = tokenText(config[key]);
      if (text === undefined) return undefined;
      const id = this.#full.token_to_id(text);
      return id === undefined ? undefined : { text, id };
    };
    this.bosToken = special('bos_token');
    this.eosToken = special('eos_token');
    this.padToken = special('pad_token');
    this.unkToken = special('unk_token');
    // The post-processor (TemplateProcessing, ByteLevel) decides first, as in the Rust library;
    // tokenizer_config's add_bos_token / add_eos_token override it when present (as transformers).
    const post = this.#full.encode('', { add_special_tokens: true }).ids;
    const postBos = this.bosToken !== undefined && post[0] === this.bosToken.id;
    const postEos = this.eosToken !== undefined && post.length > (postBos ? 1 : 0) && post[post.length - 1] === this.eosToken.id;
    this.#addBos = this.bosToken !== undefined && (typeof config.add_bos_token === 'boolean' ? config.add_bos_token : postBos);
    this.#addEos = this.eosToken !== undefined && (typeof config.add_eos_token === 'boolean' ? config.add_eos_token : postEos);
    this.sequenceSuffix = Object.freeze(this.#postSuffix());
  }

  // What the post-processor appends: encode a probe with and without it and take what follows
  // the plain ids inside the processed ones.
  #postSuffix(): number[] {
    const plain: number[] = Array.from(this.#full.encode('a', { add_special_tokens: false }).ids);
    const full: number[] = Array.from(this.#full.encode('a', { add_special_tokens: true }).ids);
    for (let at = 0; at + plain.length <= full.length; at++) {
      if (plain.every((id, i) => full[at + i] === id)) return full.slice(at + plain.length);
    }
    return [];
  }

  /**
   * How token strings map to bytes, as grammar engines need to know: 'byte_level' (GPT-2 style
   * byte-to-unicode, e.g. Llama 3, Qwen), 'byte_fallback' (SentencePiece with <0xNN> tokens, e.g.
   * Llama 2, Gemma; `prependsSpace` when the decoder strips a leading space), or 'raw'.
   */
  get vocabKind(): { kind: 'byte_level' | 'byte_fallback' | 'raw'; prependsSpace: boolean } {
    type Part = { type?: string; start?: number; decoders?: Part[] };
    const d = this.#json.decoder as Part | null | undefined;
    if (d?.type === 'ByteLevel') return { kind: 'byte_level', prependsSpace: false };
    const parts: Part[] = d?.type === 'Sequence' ? d.decoders ?? [] : d ? [d] : [];
    if (parts.some((x) => x.type === 'ByteFallback')) {
      return { kind: 'byte_fallback', prependsSpace: parts.some((x) => x.type === 'Strip' && (x.start ?? 0) > 0) };
    }
    return { kind: 'raw', prependsSpace: false };
  }

  /** Number of ids the tokenizer can produce (base vocabulary plus added tokens). */
  get vocabSize(): number {
    let n = this.#full.get_vocab(true).size;
    for (const id of this.#addedById.keys()) n = Math.max(n, id + 1);
    return n;
  }

  tokenToId(token: string): number | undefined {
    return this.#full.token_to_id(token);
  }

  idToToken(id: number): string | undefined {
    return this.#full.id_to_token(id);
  }

  /** Texts of all added tokens (special or not). */
  addedTokenTexts(): string[] {
    return [...this.#addedById.values()].map((t) => t.content);
  }

  isControlToken(id: number): boolean {
    return this.#addedById.get(id)?.special === true;
  }

  encode(text: string, options: EncodeOptions = {}): number[] {
    if (typeof text !== 'string') throw new InvalidArgumentError('text must be a string', 'text');
    const addSpecial = options.addSpecialTokens ?? true;
    let ids: number[];
    if (options.parseSpecialTokens ?? true) {
      ids = text.length === 0 ? [] : this.#full.encode(text, { add_special_tokens: false }).ids;
    } else {
      ids = this.#encodePlain(text, [...this.controlTokens.keys()]);
    }
    return addSpecial ? this.#addSpecial(ids) : ids;
  }

  /**
   * Encodes spans in order, as if they were one text, except that control tokens are matched only
   * inside trusted spans. `controlTexts` lists the strings treated as control tokens (default: the
   * special added tokens). No BOS/EOS is added: templates write their own.
   */
  encodeSegments(segments: readonly TextSegment[], controlTexts: readonly string[] = [...this.controlTokens.keys()]): number[] {
    const matcher = new LiteralMatcher(controlTexts);
    const out: number[] = [];
    // Plain runs are accumulated across segment borders and encoded together, so a user span
    // joined to template text tokenizes exactly as the whole text would.
    let run = '';
    const flush = () => {
      if (run.length > 0) out.push(...this.#encodePlain(run, controlTexts));
      run = '';
    };
    for (const seg of segments) {
      if (!seg.trusted) {
        run += seg.text;
        continue;
      }
      let pos = 0;
      for (const m of matcher.findAll(seg.text)) {
        run += seg.text.slice(pos, m.start);
        const added = this.#addedById.get(this.#full.token_to_id(m.text) ?? -1);
        if (added?.lstrip) run = run.trimEnd();
        flush();
        const id = this.#full.token_to_id(m.text);
        if (id === undefined) throw new InvalidArgumentError(`control token ${JSON.stringify(m.text)} is not in the vocabulary`, 'controlTexts');
        out.push(id);
        pos = m.start + m.text.length;
        if (added?.rstrip) while (pos < seg.text.length && /\s/.test(seg.text[pos]!)) pos++;
      }
      run += seg.text.slice(pos);
    }
    flush();
    return out;
  }

  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    if (ids.length === 0) return '';
    return this.#full.decode(ids as number[], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: options.cleanUpTokenizationSpaces ?? false,
    });
  }

  /** Adds BOS / EOS as decided in the constructor. */
  #addSpecial(ids: number[]): number[] {
    const out: number[] = [];
    if (this.#addBos) out.push(this.bosToken!.id);
    out.push(...ids);
    if (this.#addEos) out.push(this.eosToken!.id);
    return out;
  }

  /**
   * A tokenizer that treats `drop` as plain text: a shallow copy of the full one (sharing its
   * model, normalizer and pre-tokenizer, which hold no per-call state) whose added-token tables
   * leave `drop` out.
   */
  #plainTokenizer(drop: ReadonlySet<string>): HfTokenizer {
    const full = this.#full as unknown as HfTokenizerInternals;
    const added = (this.#json.added_tokens as Array<AddedTokenJson & { normalized?: boolean }>).filter((t) => !drop.has(t.content));
    if (full.added_tokens_map instanceof Map && typeof full.splitter_unnormalized?.split === 'function' && typeof full.splitter_normalized?.split === 'function') {
      const Splitter = full.splitter_unnormalized.constructor as new (words: string[]) => { split(text: string): string[] };
      const plain = Object.assign(Object.create(Object.getPrototypeOf(this.#full) as object) as object, this.#full) as unknown as HfTokenizerInternals;
      plain.added_tokens_map = new Map([...full.added_tokens_map].filter(([, t]) => !drop.has(t.content)));
      const unnormalized: string[] = [];
      const normalized: string[] = [];
      for (const t of added) {
        if (t.normalized && full.normalizer) normalized.push(full.normalizer(t.content));
        else unnormalized.push(t.content);
      }
      plain.splitter_unnormalized = new Splitter(unnormalized);
      plain.splitter_normalized = new Splitter(normalized);
      return plain as unknown as HfTokenizer;
    }
    return new HfTokenizer({ ...this.#json, added_tokens: added }, this.config);
  }

  /** Encodes `text` with the given strings matched as plain text (never as added tokens). */
  #encodePlain(text: string, controlTexts: readonly string[]): number[] {
    if (text.length === 0) return [];
    const key = [...controlTexts].sort().join('\u0000');
    let tok = this.#plain.get(key);
    if (!tok) {
      tok = this.#plainTokenizer(new Set(controlTexts));
      this.#plain.set(key, tok);
    }
    return tok.encode(text, { add_special_tokens: false }).ids;
  }
}

/**
 * @huggingface/tokenizers internals the plain variant re-points (checked at run time: when they
 * are not there, the plain variant is built from the JSON instead, ~1 s for a 150k vocabulary).
 */
interface HfTokenizerInternals {
  added_tokens_map: Map<string, { content: string }>;
  splitter_unnormalized: { split(text: string): string[] };
  splitter_normalized: { split(text: string): string[] };
  normalizer: ((text: string) => string) | null;
}

/** Leftmost-longest matching of a fixed set of strings. */
export class LiteralMatcher {
  readonly #byFirst = new Map<string, string[]>();

  constructor(literals: readonly string[]) {
    for (const l of literals) {
      if (l.length === 0) continue;
      const list = this.#byFirst.get(l[0]!) ?? [];
      list.push(l);
      this.#byFirst.set(l[0]!, list);
    }
    for (const list of this.#byFirst.values()) list.sort((a, b) => b.length - a.length);
  }

  *findAll(text: string): Generator<{ start: number; text: string }> {
    let i = 0;
    while (i < text.length) {
      const cands = this.#byFirst.get(text[i]!);
      const hit = cands?.find((c) => text.startsWith(c, i));
      if (hit) {
        yield { start: i, text: hit };
        i += hit.length;
      } else {
        i++;
      }
    }
  }
}

/** Loads tokenizer.json (required) and tokenizer_config.json (optional) from a checkpoint directory. */
export async function loadTokenizer(dir: string): Promise<Tokenizer> {
  await assertDirectory(dir);
  const json = await readOptionalJson(dir, 'tokenizer.json');
  if (!json) throw new InvalidFileError(`${dir}: no tokenizer.json (only Hugging Face fast-tokenizer files are read)`, 'tokenizer.json');
  const config = (await readOptionalJson(dir, 'tokenizer_config.json')) ?? {};
  return new Tokenizer(json, config);
}
