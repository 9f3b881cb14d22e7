/**
 * Runs corpus cases in child processes (artifacts-corpus-child.ts) and checks their outcomes.
 * A crash of the child is recorded against the case it was running (error 'CRASH') and the run
 * resumes with the next case, so one bad case cannot hide the others or kill the test runner.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import type { CorpusCase, CorpusResult } from './corpus-types.js';

const here = dirname(fileURLToPath(import.meta.url));

export function runCorpus(cases: CorpusCase[], workDir: string, env: NodeJS.ProcessEnv = process.env): Map<string, CorpusResult> {
  const results = new Map<string, CorpusResult>();
  const casesFile = join(workDir, 'cases.json');
  writeFileSync(casesFile, JSON.stringify(cases));
  const register = pathToFileURL(join(here, 'ts-register.mjs')).href;
  const child = join(here, 'artifacts-corpus-child.ts');
  let first = 0;
  while (first < cases.length) {
    const outFile = join(workDir, `results-${first}.jsonl`);
    rmSync(outFile, { force: true });
    const r = spawnSync(process.execPath, ['--import', register, child, casesFile, outFile, String(first)], {
      encoding: 'utf8', maxBuffer: 64 << 20, timeout: 300_000, env,
    });
    let text = '';
    try { text = readFileSync(outFile, 'utf8'); } catch { /* the child died before opening it */ }
    let started: string | undefined;
    let done = false;
    for (const line of text.split('\n')) {
      if (!line) continue;
      const msg = JSON.parse(line) as { start?: string; done?: boolean } & Partial<CorpusResult>;
      if (msg.start) started = msg.start;
      else if (msg.done) done = true;
      else if (msg.id) { results.set(msg.id, msg as CorpusResult); started = undefined; }
    }
    if (done) break;
    const how = `child exited with status ${r.status} signal ${r.signal}: ${(r.stderr ?? '').slice(-2000)}`;
    if (started === undefined) throw new Error(`corpus child failed outside any case: ${how}`);
    results.set(started, { id: started, ok: false, error: 'CRASH', message: how });
    first = cases.findIndex((c) => c.id === started) + 1;
  }
  return results;
}

/** Why the outcome `r` does not match case `c`, or null when it does. */
export function mismatch(c: CorpusCase, r: CorpusResult | undefined): string | null {
  const label = `${c.id} (${c.op} ${c.path}${c.name ? ` :: ${c.name}` : ''})`;
  if (!r) return `${label}: no result`;
  if (c.error === null) {
    if (!r.ok) return `${label}: expected success, got ${r.error}: ${r.message}`;
    if (c.tensors !== undefined && r.tensors !== c.tensors) return `${label}: expected ${c.tensors} tensors, got ${r.tensors}`;
    return null;
  }
  if (r.ok) return `${label}: expected ${c.error}, but it succeeded`;
  if (r.error !== c.error) return `${label}: expected ${c.error}, got ${r.error}: ${r.message}`;
  if (c.field !== undefined) {
    const allowed = Array.isArray(c.field) ? c.field : [c.field];
    if (r.field === undefined || !allowed.includes(r.field))
      return `${label}: field ${JSON.stringify(r.field)} not in ${JSON.stringify(allowed)} (${r.message})`;
  }
  return null;
}
