/**
 * `mlx-bun serve -m DIR`: an OpenAI-compatible HTTP server (the public `server` API) over a
 * continuous-batching engine (the public `execution` API). Binding anything but loopback
 * requires --api-key (or MLXB_API_KEY). SIGTERM / SIGINT drain: stop accepting, let running
 * requests finish, close the engine, exit 0.
 */
import { basename, resolve } from 'node:path';

import { loadEmbeddingProfile } from '../../embeddings/index.js';
import { createInferenceEngine } from '../../execution/index.js';
import { createServer } from '../../server/index.js';
import { num, processIO, reportError, type CommandIO, parseCommandLine } from '../common.js';
import { loadModel, MODEL_FLAGS, MODEL_HELP } from './options.js';

export const usage = `usage: mlx-bun serve -m <checkpoint-dir> [options]

Serves /v1/chat/completions, /v1/completions, /v1/models and /health (OpenAI-compatible), and
/v1/embeddings with --embeddings or when the checkpoint has sentence-transformers files.

${MODEL_HELP}
server:
      --host ADDR               bind address (default 127.0.0.1; others need --api-key)
      --port N                  (default 8080)
      --api-key KEY             required as "Authorization: Bearer KEY" (or env MLXB_API_KEY)
      --model-id ID             the model name clients send (default: the directory name)
      --embeddings              serve /v1/embeddings (pooling and normalisation as \`mlx-bun embed\`)
      --side-requests N         grammar-constrained and embedding requests run beside the engine,
                                at most N at once (default 2)
      --side-queue N            ... and at most N more waiting before 429 (default 32)
engine:
      --max-rows N              requests advanced together per step (default 16)
      --max-queue N             waiting requests before 429 (default 256)
      --max-context N           tokens per request, prompt included (default: the model's)
      --kv-bytes N              KV pool size in bytes (default: maxRows contexts up to 2 GiB)
      --block-size N            tokens per KV block (default 16)
      --prefill-chunk N         prompt tokens per row per step (default 256)
      --no-prefix-cache         do not reuse KV of shared prompt prefixes`;

export async function run(argv: readonly string[], io: CommandIO = processIO): Promise<number> {
  const parsed = parseCommandLine('serve', usage, io, argv, {
    options: {
        ...MODEL_FLAGS, host: { type: 'string' }, port: { type: 'string' }, 'api-key': { type: 'string' },
        'model-id': { type: 'string' }, 'max-rows': { type: 'string' }, 'max-queue': { type: 'string' },
        'max-context': { type: 'string' }, 'kv-bytes': { type: 'string' }, 'block-size': { type: 'string' },
        'prefill-chunk': { type: 'string' }, 'no-prefix-cache': { type: 'boolean' }, embeddings: { type: 'boolean' },
        'side-requests': { type: 'string' }, 'side-queue': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
  }, ['model']);
  if (typeof parsed === 'number') return parsed;
  const { values } = parsed;
  const modelDir = values.model!;
  try {
    const dir = resolve(modelDir);
    const profile = await loadEmbeddingProfile(dir);
    const model = await loadModel(io, dir, values);
    const engine = createInferenceEngine(model, {
      maxRows: num(values['max-rows']),
      maxQueue: num(values['max-queue']),
      maxContext: num(values['max-context']),
      kvBytes: num(values['kv-bytes']),
      blockSize: num(values['block-size']),
      prefillChunk: num(values['prefill-chunk']),
      prefixCache: !values['no-prefix-cache'],
    });
    const modelId = values['model-id'] ?? basename(dir);
    const server = await createServer({
      engine, model, modelId,
      ...(values.embeddings || profile.pooling !== undefined ? { embeddings: { target: model, profile } } : {}),
      host: values.host ?? '127.0.0.1',
      port: num(values.port) ?? 8080,
      apiKey: values['api-key'] ?? process.env.MLXB_API_KEY,
      maxSideRequests: num(values['side-requests']),
      maxSideQueue: num(values['side-queue']),
    });
    const e = engine.options;
    io.stderr.write(`serving '${modelId}' at ${server.url}/v1 (${e.maxRows} rows, context ${e.maxContext}, ${e.kvBlocks} KV blocks of ${e.blockSize} tokens)\n`);
    await new Promise<void>((done) => {
      const stop = (sig: string) => {
        io.stderr.write(`${sig}: draining\n`);
        process.off('SIGTERM', onTerm);
        process.off('SIGINT', onInt);
        void server.close().then(() => { model.dispose(); done(); });
      };
      const onTerm = () => stop('SIGTERM');
      const onInt = () => stop('SIGINT');
      process.on('SIGTERM', onTerm);
      process.on('SIGINT', onInt);
    });
    io.stderr.write('stopped\n');
    return 0;
  } catch (e) {
    return reportError(io, e);
  }
}
