/**
 * POST /v1/embeddings: the OpenAI request (input as a string, strings, token ids or lists of
 * token ids; encoding_format float or base64; dimensions) run through the public embeddings API,
 * with the checkpoint's pooling and normalisation as defaults.
 */
import { embedMany, type EmbeddingInput, type EmbeddingProfile, type EmbeddingTarget, type EmbedOptions } from '../embeddings/index.js';
import { MlxbError } from '../errors.js';
import { HttpError, invalid } from './errors.js';

/** What the server embeds with: the served model and its checkpoint's profile. */
export interface EmbeddingService {
  target: EmbeddingTarget;
  profile?: EmbeddingProfile;
}

export interface EmbeddingRequest {
  model: string;
  inputs: EmbeddingInput[];
  base64: boolean;
  dimensions?: number;
}

/** OpenAI's limit on inputs per request. */
export const MAX_INPUTS = 2048;

const isIds = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'number');

export function parseEmbeddingRequest(body: unknown): EmbeddingRequest {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw invalid('the request body must be a JSON object', null);
  const b = body as Record<string, unknown>;
  if (typeof b.model !== 'string' || b.model.length === 0) throw invalid('model is required', 'model');
  const input = b.input;
  let inputs: EmbeddingInput[];
  if (typeof input === 'string') inputs = [input];
  else if (isIds(input)) inputs = [input];
  else if (Array.isArray(input) && input.length > 0 && input.every((x) => typeof x === 'string' || isIds(x))) inputs = input as EmbeddingInput[];
  else throw invalid('input must be a string, an array of strings, an array of token ids, or an array of such arrays (non-empty)', 'input');
  if (inputs.length > MAX_INPUTS) throw invalid(`input holds ${inputs.length} items; at most ${MAX_INPUTS} per request`, 'input');
  if (inputs.some((x) => x === '')) throw invalid('input must not contain empty strings', 'input');
  const format = b.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64') throw invalid("encoding_format must be 'float' or 'base64'", 'encoding_format');
  const r: EmbeddingRequest = { model: b.model, inputs, base64: format === 'base64' };
  if (b.dimensions !== undefined && b.dimensions !== null) {
    if (typeof b.dimensions !== 'number') throw invalid('dimensions must be a number', 'dimensions');
    r.dimensions = b.dimensions;
  }
  return r;
}

/** Runs a parsed request; the response body. Library errors come back as HttpErrors on their parameter. */
export async function runEmbeddings(service: EmbeddingService, modelId: string, r: EmbeddingRequest, signal: AbortSignal) {
  const options: EmbedOptions = { signal };
  if (service.profile?.pooling) options.pooling = service.profile.pooling;
  if (service.profile?.normalize !== undefined) options.normalize = service.profile.normalize;
  if (r.dimensions !== undefined) options.dimensions = r.dimensions;
  let out;
  try {
    out = await embedMany(service.target, r.inputs, options);
  } catch (e) {
    if (e instanceof MlxbError && e.code === 'INVALID_ARGUMENT') {
      const param = e.field === 'dimensions' ? 'dimensions' : 'input';
      throw invalid(e.message, param, /context/.test(e.message) ? 'context_length_exceeded' : null);
    }
    throw e;
  }
  const tokens = out.reduce((n, x) => n + x.tokens, 0);
  return {
    object: 'list',
    data: out.map((x, index) => ({
      object: 'embedding',
      index,
      embedding: r.base64 ? Buffer.from(x.embedding.buffer, x.embedding.byteOffset, x.embedding.byteLength).toString('base64') : Array.from(x.embedding),
    })),
    model: modelId,
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  };
}

/** The error for a server started without an embedding model. */
export const noEmbeddings = () =>
  new HttpError(404, 'this server has no embedding model (start it with embeddings enabled)', 'invalid_request_error', null, 'not_found');
