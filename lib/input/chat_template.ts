/**
 * Chat templates: the checkpoint's Jinja template (tokenizer_config.json `chat_template`, a
 * string or a list of named templates, or chat_template.jinja) rendered with @huggingface/jinja
 * in the context transformers gives it (messages, tools, add_generation_prompt, bos/eos tokens,
 * per-model extras such as enable_thinking).
 *
 * `encode()` renders and tokenizes so that control tokens come only from the template. Before
 * rendering, every control-token text inside caller strings (message contents, tool schemas) is
 * swapped for a private-use sentinel character no input contains; after rendering, the text is
 * split at the template's own control tokens, and sentinels turn back into their literal text,
 * which is then tokenized as plain text. A user typing `<|im_start|>` gets `<`, `|`, `im`, ...
 */
import { Template } from '@huggingface/jinja';

import { InvalidArgumentError, InvalidFileError } from '../errors.js';
import { assertDirectory, readOptionalJson, readOptionalText, tokenText, type JsonObject } from './files.js';
import { LiteralMatcher, type TextSegment, type Tokenizer } from './tokenizer.js';

export type ChatRole = 'system' | 'user' | 'assistant' | 'tool' | (string & {});

export interface ChatContentPart {
  type: string;
  text?: string;
  [key: string]: unknown;
}

export interface ChatMessage {
  role: ChatRole;
  content: string | ChatContentPart[];
  [key: string]: unknown;
}

export interface RenderOptions {
  /** End with the header of an assistant turn (default true). */
  addGenerationPrompt?: boolean;
  /** Tool (function) schemas, passed to the template as `tools`. */
  tools?: unknown[];
  /** Anything else the template reads, e.g. `{ enable_thinking: false }`. */
  extras?: Record<string, unknown>;
}

// Sentinels: Supplementary Private Use Area-B, one code point each (survive trim/split/tojson).
const SENTINEL_BASE = 0x100000;
const SENTINEL_END = 0x10fffd;

export class ChatTemplate {
  readonly source: string;
  /** Name picked from a list of named templates ("default" or the only one), else undefined. */
  readonly name?: string;
  readonly #template: Template;
  readonly #specials: Record<string, string>;

  constructor(source: string, specials: Record<string, string> = {}, name?: string) {
    if (typeof source !== 'string' || source.length === 0) throw new InvalidArgumentError('chat template must be a non-empty string', 'chatTemplate');
    this.source = source;
    this.name = name;
    this.#specials = specials;
    try {
      this.#template = new Template(source);
    } catch (e) {
      throw new InvalidFileError(`chat template does not parse: ${(e as Error).message}`, 'chat_template');
    }
  }

  /**
   * Loads the template of a checkpoint directory: chat_template.jinja, else tokenizer_config.json
   * `chat_template` (a string, or a list of `{name, template}` where `name` picks one; default
   * "default"). Returns undefined when the checkpoint has none.
   */
  static async load(dir: string, name?: string): Promise<ChatTemplate | undefined> {
    await assertDirectory(dir);
    const config = (await readOptionalJson(dir, 'tokenizer_config.json')) ?? {};
    const specials: Record<string, string> = {};
    for (const key of ['bos_token', 'eos_token', 'pad_token', 'unk_token', 'sep_token', 'cls_token', 'mask_token']) {
      const t = tokenText(config[key]);
      if (t !== undefined) specials[key] = t;
    }
    const file = await readOptionalText(dir, 'chat_template.jinja');
    if (file !== undefined && name === undefined) return new ChatTemplate(file, specials);
    const raw = config.chat_template;
    if (typeof raw === 'string') return new ChatTemplate(raw, specials);
    if (Array.isArray(raw)) {
      const named = raw.filter((e): e is { name: string; template: string } =>
        typeof e === 'object' && e !== null && typeof (e as JsonObject).name === 'string' && typeof (e as JsonObject).template === 'string');
      const want = name ?? 'default';
      const hit = named.find((e) => e.name === want) ?? (name === undefined && named.length === 1 ? named[0] : undefined);
      if (!hit) throw new InvalidArgumentError(`no chat template named ${JSON.stringify(want)} (have: ${named.map((e) => e.name).join(', ')})`, 'name');
      return new ChatTemplate(hit.template, specials, hit.name);
    }
    if (file !== undefined) return new ChatTemplate(file, specials);
    return undefined;
  }

  /** Renders messages to the prompt text, user strings verbatim. */
  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    validateMessages(messages);
    const ctx: Record<string, unknown> = {
      ...this.#specials,
      ...(options.extras ?? {}),
      messages,
      add_generation_prompt: options.addGenerationPrompt ?? true,
    };
    if (options.tools !== undefined) ctx.tools = options.tools;
    try {
      return this.#template.render(ctx);
    } catch (e) {
      throw new InvalidArgumentError(`chat template failed: ${(e as Error).message}`, 'messages');
    }
  }

  /**
   * Renders and tokenizes, with control tokens only from the template (see the file comment).
   * Control tokens are the tokenizer's special added tokens plus the added tokens the template
   * source writes literally (e.g. Qwen3's `<think>`, `<tool_call>`), except whitespace-only ones.
   */
  encode(tokenizer: Tokenizer, messages: readonly ChatMessage[], options: RenderOptions = {}): number[] {
    return this.encodeWithText(tokenizer, messages, options).ids;
  }

  /** As encode(), also returning the rendered text (user strings verbatim). */
  encodeWithText(tokenizer: Tokenizer, messages: readonly ChatMessage[], options: RenderOptions = {}): { text: string; ids: number[] } {
    validateMessages(messages);
    const controls = this.controlTexts(tokenizer);
    // Assistant turns keep the template's own markup (Qwen3 reads `<think>...</think>` out of
    // them); control tokens proper are escaped everywhere.
    const escaper = new Escaper(controls, [...tokenizer.controlTokens.keys()], [this.source, JSON.stringify(messages), JSON.stringify(options.tools ?? null), JSON.stringify(options.extras ?? null)]);
    const safeMessages = messages.map((m) => escaper.escapeDeep(m, m.role === 'assistant') as ChatMessage);
    const safeTools = options.tools === undefined ? undefined : (escaper.escapeDeep(options.tools) as unknown[]);
    const rendered = this.render(safeMessages, { ...options, tools: safeTools });
    // Split the rendered text into trusted (template) and untrusted (sentinel -> literal) spans.
    const segments: TextSegment[] = [];
    let plain = '';
    for (const ch of rendered) {
      const literal = escaper.literalOf(ch);
      if (literal === undefined) {
        plain += ch;
      } else {
        if (plain) segments.push({ text: plain, trusted: true });
        segments.push({ text: literal, trusted: false });
        plain = '';
      }
    }
    if (plain) segments.push({ text: plain, trusted: true });
    return { text: segments.map((s) => s.text).join(''), ids: tokenizer.encodeSegments(segments, controls) };
  }

  /** The strings encode() treats as control tokens for this template and tokenizer. */
  controlTexts(tokenizer: Tokenizer): string[] {
    const out = new Set(tokenizer.controlTokens.keys());
    for (const m of new LiteralMatcher(tokenizer.addedTokenTexts()).findAll(this.source)) {
      if (!/^[\s\u2581]*$/u.test(m.text)) out.add(m.text);
    }
    return [...out];
  }
}

function validateMessages(messages: unknown): asserts messages is ChatMessage[] {
  if (!Array.isArray(messages)) throw new InvalidArgumentError('messages must be an array of {role, content}', 'messages');
  messages.forEach((m, i) => {
    if (typeof m !== 'object' || m === null) throw new InvalidArgumentError(`messages[${i}] must be an object`, 'messages');
    const msg = m as JsonObject;
    if (typeof msg.role !== 'string' || msg.role.length === 0) throw new InvalidArgumentError(`messages[${i}].role must be a non-empty string`, 'messages');
    if (typeof msg.content !== 'string' && !Array.isArray(msg.content)) {
      throw new InvalidArgumentError(`messages[${i}].content must be a string or an array of parts`, 'messages');
    }
  });
}

/** Swaps control-token texts in caller strings for sentinel code points that occur nowhere else. */
class Escaper {
  readonly #all: LiteralMatcher;
  readonly #strict: LiteralMatcher;
  readonly #toSentinel = new Map<string, string>();
  readonly #toLiteral = new Map<string, string>();
  readonly #taken: Set<number>;
  #next = SENTINEL_BASE;

  constructor(controls: readonly string[], strictControls: readonly string[], texts: readonly string[]) {
    this.#all = new LiteralMatcher(controls);
    this.#strict = new LiteralMatcher(strictControls);
    this.#taken = new Set();
    for (const t of texts) {
      for (const ch of t) {
        const cp = ch.codePointAt(0)!;
        if (cp >= SENTINEL_BASE) this.#taken.add(cp);
      }
    }
  }

  /** Copies `v` with every string escaped; `strictOnly` escapes only the special tokens. */
  escapeDeep(v: unknown, strictOnly = false): unknown {
    if (typeof v === 'string') return this.#escape(v, strictOnly ? this.#strict : this.#all);
    if (Array.isArray(v)) return v.map((x) => this.escapeDeep(x, strictOnly));
    if (typeof v === 'object' && v !== null) {
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) out[k] = this.escapeDeep(x, strictOnly);
      return out;
    }
    return v;
  }

  literalOf(ch: string): string | undefined {
    return this.#toLiteral.get(ch);
  }

  #escape(s: string, matcher: LiteralMatcher): string {
    let out = '';
    let pos = 0;
    for (const m of matcher.findAll(s)) {
      out += s.slice(pos, m.start) + this.#sentinel(m.text);
      pos = m.start + m.text.length;
    }
    return pos === 0 ? s : out + s.slice(pos);
  }

  #sentinel(literal: string): string {
    let s = this.#toSentinel.get(literal);
    if (s) return s;
    while (this.#taken.has(this.#next)) this.#next++;
    if (this.#next > SENTINEL_END) throw new InvalidArgumentError('too many distinct control-token texts in the input', 'messages');
    s = String.fromCodePoint(this.#next++);
    this.#toSentinel.set(literal, s);
    this.#toLiteral.set(s, literal);
    return s;
  }
}
