// bench:serve — N concurrent streaming clients against the OpenAI-compatible server, each sending
// a prompt of --prompt random token ids to /v1/completions and reading --gen tokens over SSE.
// Prints time to first token p50/p99, steady-state aggregate decode tok/s (tokens that arrived
// while every stream was decoding, over that interval) and overall throughput.
// --direct drives the same engine through its JS API (engine.generate, one AsyncIterable per
// stream) instead of HTTP + SSE, measured the same way: on a GPU the HTTP path (JSON, SSE framing,
// fetch on one event loop) can cost more than a decode step; printing both shows how much.
//
//   npm run bench:serve -- --model DIR [--streams 32] [--prompt 512] [--gen 128] [--device cpu]
//       [--direct] [--prefill-chunk 256] [--prefill-budget N] [--kv-gb G] [--batch-invariant] [--no-device-argmax]
//   npm run bench:serve -- --url http://127.0.0.1:8080 --model-id ID --vocab N ...   (external server)
//
// Runs the built package (dist/): `npm run build` first.
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';

const { values: a } = parseArgs({
  options: {
    model: { type: 'string' }, url: { type: 'string' }, 'model-id': { type: 'string' }, vocab: { type: 'string' },
    streams: { type: 'string', default: '32' }, prompt: { type: 'string', default: '512' }, gen: { type: 'string', default: '128' },
    device: { type: 'string', default: 'cpu' }, 'max-rows': { type: 'string' }, 'block-size': { type: 'string', default: '16' },
    'prefill-chunk': { type: 'string', default: '256' }, 'prefill-budget': { type: 'string' }, seed: { type: 'string', default: '1' },
    direct: { type: 'boolean', default: false }, 'batch-invariant': { type: 'boolean', default: false },
    'no-device-argmax': { type: 'boolean', default: false }, 'kv-gb': { type: 'string' },
  },
});
const streams = Number(a.streams), promptLen = Number(a.prompt), gen = Number(a.gen);

let url = a.url, modelId = a['model-id'] ?? 'bench', vocab = Number(a.vocab ?? 0), close = async () => {};
let engine;
if (a.direct && url) throw new Error('--direct needs --model (it drives an engine in this process)');
if (!url) {
  if (!a.model) throw new Error('give --model DIR (or --url of a running server)');
  const { loadLanguageModel } = await import('../../dist/index.js');
  const { createInferenceEngine } = await import('../../dist/execution/index.js');
  const { createServer } = await import('../../dist/server/index.js');
  const model = await loadLanguageModel(a.model, { device: a.device });
  vocab = model.vocabSize;
  engine = createInferenceEngine(model, {
    maxRows: Number(a['max-rows'] ?? streams), maxQueue: streams * 2, blockSize: Number(a['block-size']),
    prefillChunk: Number(a['prefill-chunk']), maxContext: promptLen + gen + 1,
    ...(a['prefill-budget'] ? { prefillBudget: Number(a['prefill-budget']) } : {}),
    ...(a['kv-gb'] ? { kvBytes: Math.round(Number(a['kv-gb']) * 2 ** 30) } : {}),
    batchInvariant: a['batch-invariant'], deviceArgmax: !a['no-device-argmax'],
  });
  if (a.direct) {
    close = () => engine.close();
  } else {
    const server = await createServer({ engine, model, modelId, port: 0 });
    url = server.url;
    close = () => server.close();
  }
}

let rng = Number(a.seed) >>> 0;
const rand = (n) => { rng = (Math.imul(rng, 1664525) + 1013904223) >>> 0; return rng % n; };

async function oneDirect(prompt) {
  const t0 = performance.now();
  const times = [];
  const g = engine.generate(prompt, { temperature: 0, maxTokens: gen, stopTokenIds: [] });
  for await (const ev of g) {
    void ev;
    times.push(performance.now());
  }
  return { t0, times, end: performance.now(), tokens: times.length };
}

async function one(i) {
  const prompt = Array.from({ length: promptLen }, () => rand(vocab));
  if (a.direct) return oneDirect(prompt);
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: modelId, prompt, max_tokens: gen, temperature: 0, stream: true, stream_options: { include_usage: true }, stop: null }),
  });
  if (!res.ok) throw new Error(`request ${i}: HTTP ${res.status} ${await res.text()}`);
  const times = [];
  let usage;
  const decoder = new TextDecoder();
  let buf = '';
  for await (const chunk of res.body) {
    buf += decoder.decode(chunk, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const j = JSON.parse(line.slice(6));
      if (j.usage) usage = j.usage;
      if (j.choices?.[0] && j.choices[0].finish_reason === null) times.push(performance.now());
    }
  }
  return { t0, times, end: performance.now(), tokens: usage?.completion_tokens ?? times.length };
}

const tStart = performance.now();
const results = await Promise.all(Array.from({ length: streams }, (_, i) => one(i)));
const tEnd = performance.now();
await close();

const ttft = results.map((r) => (r.times[0] ?? r.end) - r.t0).sort((x, y) => x - y);
const pct = (p) => ttft[Math.min(ttft.length - 1, Math.floor((p / 100) * ttft.length))];
const allDecoding = Math.max(...results.map((r) => r.times[0] ?? r.end));
const firstDone = Math.min(...results.map((r) => r.end));
const total = results.reduce((s, r) => s + r.tokens, 0);
let steady = 0;
if (firstDone > allDecoding) {
  const n = results.reduce((s, r) => s + r.times.filter((t) => t >= allDecoding && t <= firstDone).length, 0);
  steady = n / ((firstDone - allDecoding) / 1000);
}
const how = `${a.direct ? 'engine API' : 'HTTP'}${a['batch-invariant'] ? ', batch-invariant' : ''}${a['no-device-argmax'] ? ', host argmax' : ''}`;
console.log(`bench:serve  streams ${streams}  prompt ${promptLen}  generated ${gen}  (${a.model ?? url}, ${a.device}, ${how})`);
console.log(`  TTFT p50 ${pct(50).toFixed(1)} ms  p99 ${pct(99).toFixed(1)} ms`);
console.log(`  aggregate decode ${steady ? steady.toFixed(1) : 'n/a (streams never all decoding at once)'} tok/s (all ${streams} streams decoding)`);
console.log(`  overall ${(total / ((tEnd - tStart) / 1000)).toFixed(1)} generated tok/s over ${((tEnd - tStart) / 1000).toFixed(2)} s (${total} tokens, prefill included)`);
