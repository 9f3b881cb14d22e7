/**
 * Grammar-constrained sampling: which tokens may come next under a JSON schema, any JSON, or an
 * EBNF grammar, computed by @mlc-ai/web-xgrammar against the checkpoint's own tokenizer.
 *
 * xgrammar runs in a worker thread, one per (tokenizer, vocabulary size, stop ids): its C++
 * checks end in a WebAssembly abort() that leaves the module unusable, so a bad grammar must not
 * take the host process's copy down with it. A worker that dies fails the calls waiting on it
 * with a typed error and is replaced on the next use.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

import { InternalError, InvalidArgumentError } from '../../errors.js';
import type { Tokenizer } from '../../input/tokenizer.js';
import { WORKER_SOURCE } from './worker_source.js';

/** What the output must match. */
export type GrammarSpec =
  | { type: 'json' }
  | { type: 'json_schema'; schema: string | Record<string, unknown> }
  | { type: 'ebnf'; grammar: string };

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

/** Allowed next tokens as a bitmask: token t is allowed when bit t % 32 of word t / 32 is set. */
export function allowed(mask: Int32Array, token: number): boolean {
  return ((mask[token >>> 5]! >>> (token & 31)) & 1) === 1;
}

/** Sets every logit the mask disallows to -Infinity (in place), a 32-token word at a time. */
export function applyMask(logits: Float32Array, mask: Int32Array): Float32Array {
  const n = logits.length;
  for (let w = 0, t0 = 0; t0 < n; w++, t0 += 32) {
    const bits = w < mask.length ? mask[w]! : 0;
    if (bits === -1) continue;  // all 32 allowed
    const end = Math.min(t0 + 32, n);
    if (bits === 0) {
      logits.fill(-Infinity, t0, end);
      continue;
    }
    for (let t = t0; t < end; t++) if (((bits >>> (t - t0)) & 1) === 0) logits[t] = -Infinity;
  }
  return logits;
}

export function checkGrammarSpec(v: unknown, field = 'grammar'): GrammarSpec {
  const o = v as Record<string, unknown> | null;
  if (o === null || typeof o !== 'object') throw new InvalidArgumentError(`${field} must be an object { type: 'json' | 'json_schema' | 'ebnf', ... }`, field);
  if (o.type === 'json') return { type: 'json' };
  if (o.type === 'json_schema') {
    const s = o.schema;
    if (typeof s === 'string') {
      try { JSON.parse(s); } catch { throw new InvalidArgumentError(`${field}.schema is not valid JSON`, field); }
      return { type: 'json_schema', schema: s };
    }
    if (s === null || typeof s !== 'object' || Array.isArray(s)) throw new InvalidArgumentError(`${field}.schema must be a JSON schema object or its JSON text`, field);
    return { type: 'json_schema', schema: s as Record<string, unknown> };
  }
  if (o.type === 'ebnf') {
    if (typeof o.grammar !== 'string' || o.grammar.length === 0) throw new InvalidArgumentError(`${field}.grammar must be a non-empty EBNF string with a 'root' rule`, field);
    return { type: 'ebnf', grammar: o.grammar };
  }
  throw new InvalidArgumentError(`${field}.type must be 'json', 'json_schema' or 'ebnf'`, field);
}

class GrammarWorker {
  readonly #worker: Worker;
  readonly #pending = new Map<number, Pending>();
  #next = 1;
  dead = false;

  constructor(onDeath: () => void) {
    // Unreferenced while idle, so an idle grammar engine never keeps the process alive.
    this.#worker = new Worker(WORKER_SOURCE, { eval: true });
    this.#worker.unref();
    const die = (why: string) => {
      if (this.dead) return;
      this.dead = true;
      onDeath();
      for (const p of this.#pending.values()) p.reject(new InternalError(`the grammar worker stopped: ${why}`, 'grammar'));
      this.#pending.clear();
      this.#worker.unref();
    };
    this.#worker.on('message', (m: { id: number; ok: boolean; value?: unknown; error?: string; fatal?: boolean }) => {
      const p = this.#pending.get(m.id);
      if (!p) return;
      this.#pending.delete(m.id);
      if (this.#pending.size === 0) this.#worker.unref();
      if (m.ok) p.resolve(m.value);
      else p.reject(new InvalidArgumentError(`grammar: ${m.error ?? 'failed'}`, 'grammar'));
      if (m.fatal) die('aborted');
    });
    this.#worker.on('error', (e) => die(e.message));
    this.#worker.on('exit', (code) => die(`exit code ${code}`));
  }

  call<T>(msg: Record<string, unknown>): Promise<T> {
    if (this.dead) return Promise.reject(new InternalError('the grammar worker stopped', 'grammar'));
    const id = this.#next++;
    // Referenced while calls are pending (a caller awaiting one keeps the process alive), not otherwise.
    if (this.#pending.size === 0) this.#worker.ref();
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#worker.postMessage({ ...msg, id });
    });
  }

  terminate(): void {
    void this.#worker.terminate();
  }
}

/** A compiled grammar's matcher: feed it every sampled token; ask it which may come next. */
export class GrammarMatcher {
  readonly #w: GrammarWorker;
  readonly #id: number;

  /** @internal */
  constructor(w: GrammarWorker, id: number) {
    this.#w = w;
    this.#id = id;
  }

  /** Bitmask of the tokens allowed next; null once the grammar has accepted a stop token (the worker keeps that state). */
  mask(): Promise<Int32Array | null> {
    return this.#w.call<Int32Array | null>({ op: 'mask', matcher: this.#id });
  }

  /** Advances by `token`; false (and no change) when the grammar does not allow it. */
  accept(token: number): Promise<boolean> {
    return this.#w.call<boolean>({ op: 'accept', matcher: this.#id, token });
  }

  dispose(): void {
    if (!this.#w.dead) void this.#w.call({ op: 'free', matcher: this.#id }).catch(() => {});
  }
}

/** A grammar engine for one tokenizer, vocabulary size and set of stop ids (one worker). */
export class GrammarEngine {
  readonly #w: GrammarWorker;
  readonly #ready: Promise<unknown>;
  readonly #compiled = new Map<string, Promise<number>>();

  private constructor(tokenizer: Tokenizer, vocabSize: number, stopIds: readonly number[], onDeath: () => void) {
    this.#w = new GrammarWorker(onDeath);
    const vocab: string[] = [];
    for (let id = 0; id < vocabSize; id++) vocab.push(tokenizer.idToToken(id) ?? '');
    const { kind, prependsSpace } = tokenizer.vocabKind;
    const file = createRequire(import.meta.url).resolve('@mlc-ai/web-xgrammar');
    this.#ready = this.#w.call({ op: 'init', file, vocab, vocabType: kind, prependSpace: prependsSpace, vocabSize, stopIds: [...stopIds] });
  }

  static #engines = new WeakMap<Tokenizer, Map<string, GrammarEngine>>();

  /** The engine for this tokenizer, vocabulary size and stop ids (made once, reused). */
  static for(tokenizer: Tokenizer, vocabSize: number, stopIds: readonly number[]): GrammarEngine {
    const key = `${vocabSize}:${[...stopIds].sort((a, b) => a - b).join(',')}`;
    let m = GrammarEngine.#engines.get(tokenizer);
    if (!m) GrammarEngine.#engines.set(tokenizer, (m = new Map()));
    let e = m.get(key);
    if (!e || e.#w.dead) {
      const map = m;
      e = new GrammarEngine(tokenizer, vocabSize, stopIds, () => { if (map.get(key) === e) map.delete(key); });
      m.set(key, e);
    }
    return e;
  }

  /** A matcher at the start of `spec` (compiled once per spec and engine). */
  async matcher(spec: GrammarSpec): Promise<GrammarMatcher> {
    await this.#ready;
    const source = spec.type === 'json_schema' ? (typeof spec.schema === 'string' ? spec.schema : JSON.stringify(spec.schema))
      : spec.type === 'ebnf' ? spec.grammar : '';
    const key = `${spec.type}\u0000${source}`;
    let g = this.#compiled.get(key);
    if (!g) {
      g = this.#w.call<number>({ op: 'compile', kind: spec.type, source });
      this.#compiled.set(key, g);
      g.catch(() => this.#compiled.delete(key));
    }
    const id = await this.#w.call<number>({ op: 'matcher', grammar: await g });
    return new GrammarMatcher(this.#w, id);
  }

  /** Stops the worker (pending calls fail). */
  close(): void {
    this.#w.terminate();
  }
}
