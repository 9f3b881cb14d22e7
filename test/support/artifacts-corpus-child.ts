/**
 * Child process of artifacts-corpus.test.ts: runs corpus cases through the native loader (via
 * lib/native, as the library does) and appends one JSON line per event to a results file,
 * synchronously (a regular file, so no pipe back-pressure), so that a crash leaves a `start` line
 * without a result naming the case that killed the process.
 * Usage: node --import ./test/support/ts-register.mjs artifacts-corpus-child.ts cases.json out.jsonl first
 */
import { openSync, readFileSync, writeSync } from 'node:fs';

import { MlxbError } from '../../lib/errors.js';
import { native } from '../../lib/native/index.js';
import type { CorpusCase, CorpusResult } from './corpus-types.js';

const cases = JSON.parse(readFileSync(process.argv[2]!, 'utf8')) as CorpusCase[];
const out = openSync(process.argv[3]!, 'a');
const first = Number(process.argv[4] ?? 0);
const b = native();

function emit(o: object): void {
  writeSync(out, `${JSON.stringify(o)}\n`);
}

for (let i = first; i < cases.length; i++) {
  const c = cases[i]!;
  emit({ start: c.id });
  // Harness self-test only: proves a crash is pinned on its case (see artifacts-corpus.test.ts).
  if (process.env.MLXB_CORPUS_CRASH_CASE === c.id) process.abort();
  let r: CorpusResult;
  try {
    let tensors: number | undefined;
    if (c.op === 'weights') tensors = (await b.inspectWeights(c.path)).tensors.length;
    else if (c.op === 'tensor') await b.readTensor(c.path, c.name ?? '');
    else await b.readConfig(c.path);
    r = { id: c.id, ok: true, ...(tensors === undefined ? {} : { tensors }) };
  } catch (e) {
    const err = e as Error;
    r = {
      id: c.id, ok: false, error: err.constructor.name, message: err.message,
      ...(e instanceof MlxbError ? { code: e.code, ...(e.field === undefined ? {} : { field: e.field }) } : {}),
    };
  }
  emit(r);
}
emit({ done: true });
