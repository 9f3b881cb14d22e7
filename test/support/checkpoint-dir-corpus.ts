/**
 * Malformed checkpoint directories: sharded indexes that escape the directory, name missing or
 * inconsistent shards, or are not JSON; ambiguous and empty directories. Each escaping shard
 * name points at a file that really exists outside the directory, so a loader without the
 * confinement check would open it and the case would fail.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { CorpusCase } from './corpus-types.js';
import { encodeSafetensors, writeSafetensors, type TensorSpec } from './safetensors-writer.js';

const T: TensorSpec[] = [
  { name: 'a.weight', dtype: 'F32', shape: [2, 2] },
  { name: 'b.weight', dtype: 'BF16', shape: [3] },
];
const U: TensorSpec[] = [{ name: 'c.weight', dtype: 'F16', shape: [4] }];

export function buildDirectoryCorpus(root: string): CorpusCase[] {
  const cases: CorpusCase[] = [];
  let n = 0;
  const mk = (group: string): { dir: string; id: string } => {
    const dir = join(root, `${group}-${n}`);
    mkdirSync(dir, { recursive: true });
    return { dir, id: `${group}#${n++}` };
  };
  const push = (c: Omit<CorpusCase, 'op'>) => cases.push({ op: 'weights', ...c });
  const index = (dir: string, body: unknown) =>
    writeFileSync(join(dir, 'model.safetensors.index.json'), typeof body === 'string' ? body : JSON.stringify(body));

  // Files outside the model directories that escaping names would reach.
  writeSafetensors(join(root, 'outside.safetensors'), U);
  const abs = join(root, 'absolute.safetensors');
  writeSafetensors(abs, U);

  // Directory resolution.
  push({ id: 'dir#missing', group: 'dir', path: join(root, 'no-such-dir'), error: 'IoError', field: join(root, 'no-such-dir') });
  { const { dir, id } = mk('dir-empty'); push({ id, group: 'dir', path: dir, error: 'IoError', field: dir }); }
  { const { dir, id } = mk('dir-two-files');
    writeSafetensors(join(dir, 'a.safetensors'), T); writeSafetensors(join(dir, 'b.safetensors'), U);
    push({ id, group: 'dir', path: dir, error: 'InvalidFileError', field: dir }); }
  { const { dir, id } = mk('dir-named-like-a-file');
    const inner = join(dir, 'x.safetensors');
    mkdirSync(inner);
    push({ id, group: 'dir', path: inner, error: 'IoError', field: inner }); }
  push({ id: 'dir#dev-null', group: 'dir', path: '/dev/null', error: 'IoError', field: '/dev/null' });

  // Index that is not what it should be.
  const badIndexes: [unknown, string][] = [
    ['{', 'model.safetensors.index.json'], ['[]', 'model.safetensors.index.json'], ['', 'model.safetensors.index.json'],
    ['{"weight_map":{"a.weight":"s.safetensors","a.weight":"s.safetensors"}}', 'model.safetensors.index.json'],
    [{}, 'weight_map'], [{ weight_map: [] }, 'weight_map'], [{ weight_map: {} }, 'weight_map'], [{ weight_map: 'x' }, 'weight_map'],
    [{ weight_map: null }, 'weight_map'], [{ weight_map: { 'a.weight': 1 } }, 'a.weight'], [{ weight_map: { 'a.weight': null } }, 'a.weight'],
    [{ weight_map: { 'a.weight': ['s.safetensors'] } }, 'a.weight'],
  ];
  for (const [body, field] of badIndexes) {
    const { dir, id } = mk('index-bad');
    writeSafetensors(join(dir, 's.safetensors'), T);
    index(dir, body);
    push({ id, group: 'index-bad', path: dir, error: 'InvalidFileError', field });
  }

  // Shard names must stay inside the directory.
  const escaping = ['../outside.safetensors', abs, 'sub/x.safetensors', '..', '.', '', 'x\\y.safetensors', 'a\u0000.safetensors',
    'x.bin', '..safetensors', 'a/../s.safetensors', './s.safetensors', '../dir-escape/s.safetensors', 's.safetensors/',
    '....safetensors', 'sub//x.safetensors'];
  for (const shard of escaping) {
    const { dir, id } = mk('shard-name');
    writeSafetensors(join(dir, 's.safetensors'), T);
    mkdirSync(join(dir, 'sub'), { recursive: true });
    writeSafetensors(join(dir, 'sub', 'x.safetensors'), U);
    index(dir, { weight_map: { 'a.weight': 's.safetensors', 'b.weight': 's.safetensors', 'c.weight': shard } });
    push({ id, group: 'shard-name', path: dir, error: 'InvalidFileError', field: 'c.weight' });
  }

  // Missing, unreadable or inconsistent shards.
  { const { dir, id } = mk('shard-missing');
    writeSafetensors(join(dir, 's.safetensors'), T);
    index(dir, { weight_map: { 'a.weight': 's.safetensors', 'b.weight': 's.safetensors', 'c.weight': 'gone.safetensors' } });
    push({ id, group: 'shard-missing', path: dir, error: 'IoError', field: 'gone.safetensors' }); }
  { const { dir, id } = mk('shard-is-dir');
    writeSafetensors(join(dir, 's.safetensors'), T);
    mkdirSync(join(dir, 'd.safetensors'));
    index(dir, { weight_map: { 'a.weight': 's.safetensors', 'b.weight': 's.safetensors', 'c.weight': 'd.safetensors' } });
    push({ id, group: 'shard-missing', path: dir, error: 'IoError', field: 'd.safetensors' }); }
  for (const cut of [0, 5, 12, 40]) {
    const { dir, id } = mk('shard-broken');
    writeSafetensors(join(dir, 's.safetensors'), T);
    const bytes = encodeSafetensors(U);
    writeFileSync(join(dir, 'u.safetensors'), bytes.subarray(0, bytes.length - 1 - cut));
    index(dir, { weight_map: { 'a.weight': 's.safetensors', 'b.weight': 's.safetensors', 'c.weight': 'u.safetensors' } });
    push({ id, group: 'shard-broken', path: dir, error: 'InvalidFileError', field: join(dir, 'u.safetensors') });
  }
  const inconsistent: [Record<string, string>, string][] = [
    [{ 'a.weight': 's.safetensors', 'b.weight': 's.safetensors', 'c.weight': 'u.safetensors', 'ghost.weight': 'u.safetensors' }, 'ghost.weight'],
    [{ 'a.weight': 's.safetensors', 'c.weight': 'u.safetensors' }, 'b.weight'],
    [{ 'a.weight': 's.safetensors', 'b.weight': 'u.safetensors', 'c.weight': 'u.safetensors' }, 'b.weight'],
  ];
  for (const [wm, field] of inconsistent) {
    const { dir, id } = mk('index-inconsistent');
    writeSafetensors(join(dir, 's.safetensors'), T);
    writeSafetensors(join(dir, 'u.safetensors'), U);
    index(dir, { weight_map: wm });
    push({ id, group: 'index-inconsistent', path: dir, error: 'InvalidFileError', field });
  }
  { const { dir, id } = mk('shard-duplicate');
    writeSafetensors(join(dir, 's.safetensors'), T);
    writeSafetensors(join(dir, 'u.safetensors'), [...U, T[0]!]);
    index(dir, { weight_map: { 'a.weight': 's.safetensors', 'b.weight': 's.safetensors', 'c.weight': 'u.safetensors' } });
    push({ id, group: 'index-inconsistent', path: dir, error: 'InvalidFileError', field: 'a.weight' }); }

  // Valid controls: a good sharded dir; the index wins over a broken model.safetensors.
  { const { dir, id } = mk('sharded-ok');
    writeSafetensors(join(dir, 's.safetensors'), T);
    writeSafetensors(join(dir, 'u.safetensors'), U);
    index(dir, { metadata: { total_size: 30 }, weight_map: { 'a.weight': 's.safetensors', 'b.weight': 's.safetensors', 'c.weight': 'u.safetensors' } });
    push({ id, group: 'sharded-ok', path: dir, error: null, tensors: 3 });
    const other = mk('sharded-ok');
    writeSafetensors(join(other.dir, 's.safetensors'), T);
    writeSafetensors(join(other.dir, 'u.safetensors'), U);
    writeFileSync(join(other.dir, 'model.safetensors'), 'garbage');
    index(other.dir, { weight_map: { 'a.weight': 's.safetensors', 'b.weight': 's.safetensors', 'c.weight': 'u.safetensors' } });
    push({ id: other.id, group: 'sharded-ok', path: other.dir, error: null, tensors: 3 }); }
  return cases;
}
