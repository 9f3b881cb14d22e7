/**
 * OpenAI-shaped errors: `{ error: { message, type, param, code } }` with the HTTP status, and the
 * mapping from the library's typed errors (option names back to the OpenAI parameter names).
 */
import { BusyError, MlxbError } from '../errors.js';

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
  }
  body(): OpenAIErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const invalid = (message: string, param: string | null, code: string | null = null) =>
  new HttpError(400, message, 'invalid_request_error', param, code);

/** Library option name -> OpenAI request parameter. */
const PARAM_NAMES: Record<string, string> = {
  maxTokens: 'max_tokens',
  temperature: 'temperature',
  topP: 'top_p',
  topK: 'top_k',
  minP: 'min_p',
  repetitionPenalty: 'repetition_penalty',
  presencePenalty: 'presence_penalty',
  frequencyPenalty: 'frequency_penalty',
  logitBias: 'logit_bias',
  seed: 'seed',
  stop: 'stop',
  grammar: 'response_format',
  logprobs: 'logprobs',
  topLogprobs: 'top_logprobs',
};

/** Turns anything thrown while serving a request into the HTTP error to send. */
export function toHttpError(e: unknown, inputParam: 'messages' | 'prompt'): HttpError {
  if (e instanceof HttpError) return e;
  if (e instanceof BusyError) return new HttpError(429, e.message, 'rate_limit_error', null, 'server_busy');
  if (e instanceof MlxbError && e.code === 'INVALID_ARGUMENT') {
    if (e.field === 'input' || e.field === 'prompt') {
      const context = /context/.test(e.message);
      return invalid(e.message, inputParam, context ? 'context_length_exceeded' : null);
    }
    return invalid(e.message, e.field ? (PARAM_NAMES[e.field] ?? e.field) : null);
  }
  // A request feature this server cannot serve for this model (e.g. a grammar on a model without
  // a tokenizer): the client's to change.
  if (e instanceof MlxbError && e.code === 'UNSUPPORTED' && e.field && PARAM_NAMES[e.field]) return invalid(e.message, PARAM_NAMES[e.field]!);
  const message = e instanceof Error ? e.message : String(e);
  return new HttpError(500, message, 'server_error', null, e instanceof MlxbError ? e.code.toLowerCase() : null);
}
