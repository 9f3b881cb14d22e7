/**
 * OpenAI request bodies -> library calls. This layer checks only the request's shape (JSON types
 * and what the server does not support); ranges are validated once, by generate() itself, and its
 * typed errors are mapped back to the OpenAI parameter names (errors.ts).
 */
import type { GenerateOptions, GenerationInput } from '../generation/index.js';
import type { ChatMessage } from '../input/index.js';
import { invalid } from './errors.js';

export interface ParsedRequest {
  model: string;
  input: GenerationInput;
  options: GenerateOptions;
  stream: boolean;
  includeUsage: boolean;
  /** chat: logprobs requested (content list); completions: the legacy integer form. */
  logprobs: boolean;
}

type Json = Record<string, unknown>;

function obj(body: unknown): Json {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw invalid('the request body must be a JSON object', null);
  return body as Json;
}

function optional<T>(b: Json, key: string, check: (v: unknown) => v is T, what: string): T | undefined {
  const v = b[key];
  if (v === undefined || v === null) return undefined;
  if (!check(v)) throw invalid(`${key} must be ${what}`, key);
  return v;
}

const isNumber = (v: unknown): v is number => typeof v === 'number';
const isBool = (v: unknown): v is boolean => typeof v === 'boolean';
const isString = (v: unknown): v is string => typeof v === 'string';
const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

function common(b: Json): { model: string; options: GenerateOptions; stream: boolean; includeUsage: boolean } {
  const model = b.model;
  if (typeof model !== 'string' || model.length === 0) throw invalid('model is required', 'model');
  const n = optional(b, 'n', isNumber, 'a number');
  if (n !== undefined && n !== 1) throw invalid('only n = 1 is supported', 'n');
  const stream = optional(b, 'stream', isBool, 'a boolean') ?? false;
  const so = optional(b, 'stream_options', isObject, 'an object');
  const includeUsage = so?.include_usage === true;
  const options: GenerateOptions = {};
  const num = (key: string, to: keyof GenerateOptions) => {
    const v = optional(b, key, isNumber, 'a number');
    if (v !== undefined) (options as Record<string, unknown>)[to] = v;
  };
  num('temperature', 'temperature');
  num('top_p', 'topP');
  num('top_k', 'topK');
  num('min_p', 'minP');
  num('repetition_penalty', 'repetitionPenalty');
  num('presence_penalty', 'presencePenalty');
  num('frequency_penalty', 'frequencyPenalty');
  num('seed', 'seed');
  const stop = b.stop;
  if (stop !== undefined && stop !== null) {
    if (typeof stop !== 'string' && !(Array.isArray(stop) && stop.every(isString))) throw invalid('stop must be a string or an array of strings', 'stop');
    options.stop = stop as string | string[];
  }
  const bias = optional(b, 'logit_bias', isObject, 'an object of token id -> bias');
  if (bias !== undefined) options.logitBias = bias as Record<number, number>;
  const rf = optional(b, 'response_format', isObject, 'an object');
  if (rf !== undefined) {
    if (rf.type === 'json_object') {
      options.grammar = { type: 'json_schema', schema: { type: 'object', additionalProperties: true } };
    } else if (rf.type === 'json_schema') {
      const js = rf.json_schema;
      if (!isObject(js) || !isObject(js.schema)) throw invalid('response_format.json_schema.schema must be a JSON schema object', 'response_format');
      options.grammar = { type: 'json_schema', schema: js.schema };
    } else if (rf.type !== 'text') {
      throw invalid("response_format.type must be 'text', 'json_object' or 'json_schema'", 'response_format');
    }
  }
  return { model, options, stream, includeUsage };
}

export function parseChatRequest(body: unknown): ParsedRequest {
  const b = obj(body);
  const c = common(b);
  const messages = b.messages;
  if (!Array.isArray(messages) || messages.length === 0) throw invalid('messages must be a non-empty array', 'messages');
  const input: ChatMessage[] = messages.map((m, i) => {
    if (!isObject(m) || typeof m.role !== 'string') throw invalid(`messages[${i}] must be an object with a role`, 'messages');
    let content = m.content;
    if (content === null || content === undefined) content = '';
    if (Array.isArray(content)) {
      for (const p of content) {
        if (!isObject(p) || p.type !== 'text' || typeof p.text !== 'string') {
          throw invalid(`messages[${i}].content parts must be { type: "text", text } (other content is not supported)`, 'messages');
        }
      }
    } else if (typeof content !== 'string') throw invalid(`messages[${i}].content must be a string or an array of parts`, 'messages');
    return { ...m, role: m.role, content } as ChatMessage;
  });
  const maxTokens = optional(b, 'max_completion_tokens', isNumber, 'a number') ?? optional(b, 'max_tokens', isNumber, 'a number');
  if (maxTokens !== undefined) c.options.maxTokens = maxTokens;
  const logprobs = optional(b, 'logprobs', isBool, 'a boolean') ?? false;
  const top = optional(b, 'top_logprobs', isNumber, 'a number');
  if (top !== undefined && !logprobs) throw invalid('top_logprobs requires logprobs: true', 'top_logprobs');
  if (logprobs) c.options.logprobs = true;
  if (top !== undefined) c.options.topLogprobs = top;
  const tools = optional(b, 'tools', Array.isArray, 'an array');
  if (tools !== undefined) c.options.chat = { tools };
  return { model: c.model, input, options: c.options, stream: c.stream, includeUsage: c.includeUsage, logprobs };
}

export function parseCompletionRequest(body: unknown): ParsedRequest {
  const b = obj(body);
  const c = common(b);
  const prompt = b.prompt;
  let input: GenerationInput;
  if (typeof prompt === 'string') input = prompt;
  else if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((t) => typeof t === 'number')) input = prompt as number[];
  else if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === 'string') input = prompt[0];
  else throw invalid('prompt must be a string or an array of token ids (batches of prompts are not supported)', 'prompt');
  c.options.maxTokens = optional(b, 'max_tokens', isNumber, 'a number') ?? 16;
  if (b.echo === true) throw invalid('echo is not supported', 'echo');
  if (b.suffix !== undefined && b.suffix !== null) throw invalid('suffix is not supported', 'suffix');
  const lp = optional(b, 'logprobs', isNumber, 'a number');
  if (lp !== undefined) {
    c.options.logprobs = true;
    c.options.topLogprobs = lp;
  }
  return { model: c.model, input, options: c.options, stream: c.stream, includeUsage: c.includeUsage, logprobs: lp !== undefined };
}
