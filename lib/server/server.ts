/**
 * OpenAI-compatible HTTP server on node:http, built only on the package's public API: an
 * InferenceEngine serves /v1/chat/completions and /v1/completions (JSON or SSE), plus /v1/models,
 * /health and, when given an embedding service, /v1/embeddings. Binds 127.0.0.1 unless told otherwise; any other address needs an API key
 * (Bearer, constant-time compare, every route but /health). A client that disconnects aborts its
 * request (the engine drops the row at its next step); close() drains: stop accepting, let
 * running requests finish, close the engine.
 */
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import { InvalidArgumentError } from '../errors.js';
import type { InferenceEngine } from '../execution/index.js';
import { generate, type GenerationEvent, type GenerationTarget } from '../generation/index.js';
import { noEmbeddings, parseEmbeddingRequest, runEmbeddings, type EmbeddingService } from './embeddings.js';
import { HttpError, invalid, toHttpError } from './errors.js';
import { RequestLane } from './lane.js';
import { parseChatRequest, parseCompletionRequest, type ParsedRequest } from './requests.js';
import { chatLogprobs, completionLogprobs, finishReason, usage } from './responses.js';

export interface ServerOptions {
  engine: InferenceEngine;
  /** The model the engine serves (its tokenizer names tokens in log-probabilities). */
  model: GenerationTarget;
  /** The id clients pass as `model` and /v1/models lists. */
  modelId: string;
  /** Serves /v1/embeddings (the same model id); without it that route is a 404. */
  embeddings?: EmbeddingService;
  /** Default 127.0.0.1. Any other address requires apiKey. */
  host?: string;
  /** Default 8080; 0 picks a free port. */
  port?: number;
  apiKey?: string;
  /** Largest request body in bytes; default 4 MiB. */
  maxBodyBytes?: number;
  /** SSE comment interval while streaming; default 15 s. */
  heartbeatMs?: number;
  /** /health fails when the engine made no progress this long while work is queued; default 30 s. */
  stallMs?: number;
  /**
   * Requests the engine does not batch (grammar-constrained generation, embeddings) run beside it:
   * at most this many at once (default 2) ...
   */
  maxSideRequests?: number;
  /** ... and at most this many more waiting (default 32); one more is a 429, as a full engine queue is. */
  maxSideQueue?: number;
}

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  /** Stops accepting connections, lets running requests finish, then closes the engine. */
  close(): Promise<void>;
}

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost']);

function digest(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

function sendError(res: ServerResponse, e: HttpError): void {
  if (res.headersSent) {
    if (!res.writableEnded) res.end();
    return;
  }
  const extra: Record<string, string> = e.status === 429 ? { 'retry-after': '1' } : {};
  const data = JSON.stringify(e.body());
  res.writeHead(e.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data), ...extra });
  res.end(data);
}

function readBody(req: IncomingMessage, limit: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > limit) {
      reject(new HttpError(413, `the request body exceeds ${limit} bytes`, 'invalid_request_error', null, 'request_too_large'));
      req.resume();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (c: Buffer) => {
      if (failed) return;
      size += c.length;
      if (size > limit) {
        failed = true;
        reject(new HttpError(413, `the request body exceeds ${limit} bytes`, 'invalid_request_error', null, 'request_too_large'));
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      if (failed) return;
      const text = Buffer.concat(chunks).toString('utf8');
      try {
        resolve(text.length === 0 ? undefined : JSON.parse(text));
      } catch {
        reject(invalid('the request body is not valid JSON', null));
      }
    });
    req.on('error', (e) => { if (!failed) reject(e); });
  });
}

export function createServer(options: ServerOptions): Promise<RunningServer> {
  const o = options;
  if (!o || typeof o !== 'object') throw new InvalidArgumentError('options must be an object', 'options');
  const host = o.host ?? '127.0.0.1';
  if (!LOOPBACK.has(host) && !o.apiKey) {
    throw new InvalidArgumentError(`binding ${host} exposes the server beyond this machine: an apiKey is required`, 'apiKey');
  }
  if (o.apiKey !== undefined && (typeof o.apiKey !== 'string' || o.apiKey.length < 8)) {
    throw new InvalidArgumentError('apiKey must be a string of at least 8 characters', 'apiKey');
  }
  const keyDigest = o.apiKey ? digest(o.apiKey) : undefined;
  const maxBody = o.maxBodyBytes ?? 4 * 1024 * 1024;
  const heartbeatMs = o.heartbeatMs ?? 15_000;
  const stallMs = o.stallMs ?? 30_000;
  const engine = o.engine;
  const side = new RequestLane(o.maxSideRequests ?? 2, o.maxSideQueue ?? 32);
  const created = Math.floor(Date.now() / 1000);
  const active = new Set<AbortController>();
  let draining = false;

  const authorized = (req: IncomingMessage): boolean => {
    if (!keyDigest) return true;
    const h = req.headers.authorization ?? '';
    const m = /^Bearer (.+)$/.exec(h);
    return m !== null && timingSafeEqual(digest(m[1]!), keyDigest);
  };

  const health = (res: ServerResponse) => {
    const s = engine.stats();
    const pending = s.rows + s.queue;
    const stalled = pending > 0 && s.msSinceProgress > stallMs;
    const ok = !stalled && !s.closed && !draining;
    sendJson(res, ok ? 200 : 503, {
      status: ok ? 'ok' : stalled ? 'stalled' : 'closing',
      rows: s.rows, queue: s.queue, kv_blocks: s.kvBlocks, tokens_per_second: s.tokensPerSecond,
      ms_since_progress: s.msSinceProgress, side_running: side.running, side_queue: side.waiting,
    });
  };

  const generateFor = async (kind: 'chat' | 'completion', req: IncomingMessage, res: ServerResponse) => {
    const inputParam = kind === 'chat' ? 'messages' : 'prompt';
    let parsed: ParsedRequest;
    const ac = new AbortController();
    try {
      const body = await readBody(req, maxBody);
      parsed = kind === 'chat' ? parseChatRequest(body) : parseCompletionRequest(body);
      if (parsed.model !== o.modelId) {
        throw new HttpError(404, `the model '${parsed.model}' does not exist; this server serves '${o.modelId}'`, 'invalid_request_error', 'model', 'model_not_found');
      }
    } catch (e) {
      sendError(res, toHttpError(e, inputParam));
      return;
    }
    // A client that goes away aborts its request (the row leaves at the engine's next step; a
    // request still waiting for the side lane leaves the lane).
    const onClose = () => { if (!res.writableFinished) ac.abort(); };
    res.on('close', onClose);
    active.add(ac);
    let release: (() => void) | undefined;
    try {
      if (draining) throw new HttpError(503, 'the server is shutting down', 'server_error', null, 'shutting_down');
      let gen;
      if (parsed.options.grammar) {
        // Grammar-constrained requests run beside the engine (generate(): host sampling under the mask).
        release = await side.acquire(ac.signal);
        gen = generate(o.model, parsed.input, { ...parsed.options, signal: ac.signal });
      } else {
        gen = engine.generate(parsed.input, { ...parsed.options, signal: ac.signal });
      }
      const id = (kind === 'chat' ? 'chatcmpl-' : 'cmpl-') + randomUUID().replace(/-/g, '');
      if (parsed.stream) await streamResponse(kind, id, parsed, gen, res);
      else await jsonResponse(kind, id, parsed, gen, res);
    } catch (e) {
      if (!ac.signal.aborted) sendError(res, toHttpError(e, inputParam));
      else if (!res.writableEnded) res.end();
    } finally {
      release?.();
      active.delete(ac);
      res.off('close', onClose);
    }
  };

  const embeddingsFor = async (req: IncomingMessage, res: ServerResponse) => {
    const ac = new AbortController();
    const onClose = () => { if (!res.writableFinished) ac.abort(); };
    res.on('close', onClose);
    active.add(ac);
    let release: (() => void) | undefined;
    try {
      if (!o.embeddings) throw noEmbeddings();
      const r = parseEmbeddingRequest(await readBody(req, maxBody));
      if (r.model !== o.modelId) {
        throw new HttpError(404, `the model '${r.model}' does not exist; this server serves '${o.modelId}'`, 'invalid_request_error', 'model', 'model_not_found');
      }
      if (draining) throw new HttpError(503, 'the server is shutting down', 'server_error', null, 'shutting_down');
      release = await side.acquire(ac.signal);
      const body = await runEmbeddings(o.embeddings, o.modelId, r, ac.signal);
      if (!ac.signal.aborted) sendJson(res, 200, body);
    } catch (e) {
      if (!ac.signal.aborted) sendError(res, toHttpError(e, 'prompt'));
      else if (!res.writableEnded) res.end();
    } finally {
      release?.();
      active.delete(ac);
      res.off('close', onClose);
    }
  };

  const jsonResponse = async (kind: 'chat' | 'completion', id: string, p: ParsedRequest, gen: AsyncIterable<GenerationEvent> & { result: Promise<import('../generation/index.js').GenerationResult> }, res: ServerResponse) => {
    const events: GenerationEvent[] = [];
    for await (const e of gen) if (p.logprobs) events.push(e);
    const r = await gen.result;
    if (r.finishReason === 'abort') return;
    const base = { id, created: Math.floor(Date.now() / 1000), model: o.modelId };
    if (kind === 'chat') {
      sendJson(res, 200, {
        ...base, object: 'chat.completion',
        choices: [{
          index: 0, message: { role: 'assistant', content: r.text }, finish_reason: finishReason(r),
          logprobs: p.logprobs ? chatLogprobs(events, o.model.tokenizer) : null,
        }],
        usage: usage(r),
      });
    } else {
      sendJson(res, 200, {
        ...base, object: 'text_completion',
        choices: [{
          index: 0, text: r.text, finish_reason: finishReason(r),
          logprobs: p.logprobs ? completionLogprobs(events, o.model.tokenizer) : null,
        }],
        usage: usage(r),
      });
    }
  };

  const streamResponse = async (kind: 'chat' | 'completion', id: string, p: ParsedRequest, gen: AsyncIterable<GenerationEvent> & { result: Promise<import('../generation/index.js').GenerationResult> }, res: ServerResponse) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    res.flushHeaders();
    const write = (data: unknown) => { if (!res.writableEnded) res.write(`data: ${JSON.stringify(data)}\n\n`); };
    const heartbeat = setInterval(() => { if (!res.writableEnded) res.write(': ping\n\n'); }, heartbeatMs);
    const created = Math.floor(Date.now() / 1000);
    const object = kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
      ({ id, object, created, model: o.modelId, choices: [{ index: 0, ...choice }], ...extra });
    let offset = 0;
    try {
      if (kind === 'chat') write(chunk({ delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }));
      for await (const e of gen) {
        if (e.text.length === 0 && !p.logprobs) continue;
        if (kind === 'chat') {
          write(chunk({ delta: { content: e.text }, logprobs: p.logprobs ? chatLogprobs([e], o.model.tokenizer) : null, finish_reason: null }));
        } else {
          write(chunk({ text: e.text, logprobs: p.logprobs ? completionLogprobs([e], o.model.tokenizer, offset) : null, finish_reason: null }));
          offset += e.text.length;
        }
      }
      const r = await gen.result;
      if (r.finishReason === 'abort') return;
      if (kind === 'chat') write(chunk({ delta: {}, logprobs: null, finish_reason: finishReason(r) }));
      else write(chunk({ text: '', logprobs: null, finish_reason: finishReason(r) }));
      if (p.includeUsage) write({ id, object, created, model: o.modelId, choices: [], usage: usage(r) });
      if (!res.writableEnded) res.write('data: [DONE]\n\n');
    } catch (e) {
      const err = toHttpError(e, kind === 'chat' ? 'messages' : 'prompt');
      write(err.body());
    } finally {
      clearInterval(heartbeat);
      if (!res.writableEnded) res.end();
    }
  };

  const handler = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname.replace(/\/+$/, '') || '/';
    try {
      if (path === '/health' && req.method === 'GET') return health(res);
      if (!authorized(req)) {
        throw new HttpError(401, 'missing or invalid API key (Authorization: Bearer <key>)', 'invalid_request_error', null, 'invalid_api_key');
      }
      if (path === '/v1/models' && req.method === 'GET') {
        return sendJson(res, 200, { object: 'list', data: [{ id: o.modelId, object: 'model', created, owned_by: 'mlx-bun' }] });
      }
      if (path === `/v1/models/${o.modelId}` && req.method === 'GET') {
        return sendJson(res, 200, { id: o.modelId, object: 'model', created, owned_by: 'mlx-bun' });
      }
      if (path === '/v1/chat/completions' || path === '/v1/completions') {
        if (req.method !== 'POST') throw new HttpError(405, `${req.method} is not allowed on ${path}`, 'invalid_request_error');
        return await generateFor(path === '/v1/chat/completions' ? 'chat' : 'completion', req, res);
      }
      if (path === '/v1/embeddings') {
        if (req.method !== 'POST') throw new HttpError(405, `${req.method} is not allowed on ${path}`, 'invalid_request_error');
        return await embeddingsFor(req, res);
      }
      throw new HttpError(404, `no route ${req.method} ${path}`, 'invalid_request_error', null, 'not_found');
    } catch (e) {
      sendError(res, toHttpError(e, 'messages'));
    }
  };

  const server: Server = createHttpServer((req, res) => { void handler(req, res); });
  server.keepAliveTimeout = 5_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port ?? 8080, host, () => {
      server.off('error', reject);
      const addr = server.address() as AddressInfo;
      const shownHost = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
      let closing: Promise<void> | undefined;
      resolve({
        url: `http://${shownHost}:${addr.port}`,
        port: addr.port,
        close() {
          closing ??= (async () => {
            draining = true;
            const stopped = new Promise<void>((r) => server.close(() => r()));
            server.closeIdleConnections();
            await engine.close();  // drains: running and queued requests finish
            for (let i = 0; i < 500 && active.size > 0; i++) await new Promise((r) => setTimeout(r, 10));
            server.closeAllConnections();
            await stopped;
          })();
          return closing;
        },
      });
    });
  });
}
