// Saved sessions on the CPU (oracle fixtures, token ids in): a restored session continues exactly
// as the one that was saved (same logits, bit for bit), its token ids come back, a failed save
// leaves nothing behind, and damaged files or files of another model are typed errors.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { InvalidArgumentError, InvalidFileError, IoError, UnsupportedError } from '../lib/errors.js';
import { loadModel, type Model } from '../lib/models/index.js';
import { Session } from '../lib/state/index.js';
import { fixtureDir, oracle } from './helpers/model-fixtures.js';

let tmp: string;
let qwen3: Model;
let llama: Model;
const ids = () => oracle('qwen3').prompt_ids.slice(0, 20);

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'mlxb-saved-'));
  qwen3 = await loadModel(fixtureDir('qwen3'), { device: 'cpu', dtype: 'float32' });
  llama = await loadModel(fixtureDir('llama'), { device: 'cpu', dtype: 'float32' });
});
afterAll(() => {
  qwen3?.dispose();
  llama?.dispose();
  rmSync(tmp, { recursive: true, force: true });
});

describe('Session.save / Session.restore', () => {
  it('a restored session continues with the logits the saved one gives, and keeps its token ids', async () => {
    const path = join(tmp, 'a.session');
    using a = new Session(qwen3, { maxTokens: 64 });
    await a.forward(ids().slice(0, 12));
    await a.forward(ids().slice(12));
    await a.save(path);
    using b = await Session.restore(qwen3, path);
    expect(b.length).toBe(20);
    expect(b.tokens).toEqual(ids());
    const next = [3, 141, 59];
    const want = await a.forward(next, { allRows: true });
    const got = await b.forward(next, { allRows: true });
    expect(Array.from(got)).toEqual(Array.from(want));
    expect(b.tokens).toEqual([...ids(), ...next]);
    expect(readdirSync(tmp).filter((f) => f.includes('.tmp-'))).toEqual([]);
  });

  it('an empty session and a truncated one round-trip too', async () => {
    using a = new Session(qwen3, { maxTokens: 32 });
    await a.save(join(tmp, 'empty.session'));
    using e = await Session.restore(qwen3, join(tmp, 'empty.session'));
    expect([e.length, e.tokens]).toEqual([0, []]);
    await a.forward(ids());
    a.truncate(7);
    expect(a.tokens).toEqual(ids().slice(0, 7));
    await a.save(join(tmp, 't.session'));
    using t = await Session.restore(qwen3, join(tmp, 't.session'), { maxTokens: 9 });
    expect(t.maxTokens).toBe(9);
    using fresh = new Session(qwen3, { maxTokens: 32 });
    await fresh.forward(ids().slice(0, 7));
    expect(Array.from(await t.forward([5]))).toEqual(Array.from(await fresh.forward([5])));
  });

  it('a save that cannot complete leaves no file and no temporary behind', async () => {
    using a = new Session(qwen3, { maxTokens: 32 });
    await a.forward(ids());
    const missing = join(tmp, 'no-such-dir', 'x.session');
    await expect(a.save(missing)).rejects.toBeInstanceOf(IoError);
    expect(readdirSync(tmp).filter((f) => f.includes('.tmp-'))).toEqual([]);
    // Over an existing file: replaced whole.
    const path = join(tmp, 'over.session');
    writeFileSync(path, 'old contents');
    await a.save(path);
    using r = await Session.restore(qwen3, path);
    expect(r.tokens).toEqual(ids());
  });

  it('damaged files are InvalidFileError, another model InvalidArgumentError, a missing file IoError', async () => {
    const path = join(tmp, 'good.session');
    using a = new Session(qwen3, { maxTokens: 32 });
    await a.forward(ids());
    await a.save(path);
    const good = readFileSync(path);
    const variant = (name: string, bytes: Buffer) => {
      const p = join(tmp, name);
      writeFileSync(p, bytes);
      return p;
    };
    const flipped = Buffer.from(good);
    flipped[flipped.length - 5]! ^= 0x40;
    const hlen = good.readUInt32LE(8);
    const header = JSON.parse(good.subarray(12, 12 + hlen).toString('utf8')) as Record<string, unknown>;
    const withHeader = (h: Record<string, unknown>) => {
      const j = Buffer.from(JSON.stringify(h));
      const len = Buffer.alloc(4);
      len.writeUInt32LE(j.length);
      return Buffer.concat([good.subarray(0, 8), len, j, good.subarray(12 + hlen)]);
    };
    const damaged = [
      variant('truncated', good.subarray(0, good.length - 100)),
      variant('short', good.subarray(0, 6)),
      variant('magic', Buffer.concat([Buffer.from('NOTASESS'), good.subarray(8)])),
      variant('flipped', flipped),
      variant('hlen', Buffer.concat([good.subarray(0, 8), Buffer.from([0xff, 0xff, 0xff, 0x7f]), good.subarray(12)])),
      variant('json', Buffer.concat([good.subarray(0, 12), Buffer.alloc(hlen, 0x7b), good.subarray(12 + hlen)])),
      variant('version', withHeader({ ...header, version: 99 })),
      variant('tokens', withHeader({ ...header, tokens: [1, 2] })),
      variant('vocab', withHeader({ ...header, tokens: (header.tokens as number[]).map(() => 1e6) })),
      variant('layers', withHeader({ ...header, layers: 3 })),
    ];
    for (const p of damaged) await expect(Session.restore(qwen3, p), p).rejects.toBeInstanceOf(InvalidFileError);
    await expect(Session.restore(llama, path)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(Session.restore(qwen3, join(tmp, 'absent.session'))).rejects.toBeInstanceOf(IoError);
    await expect(Session.restore(qwen3, '')).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('sliding-window models refuse to save', async () => {
    await using g = await loadModel(fixtureDir('gemma2'), { device: 'cpu', dtype: 'float32' });
    using s = new Session(g, { maxTokens: 16 });
    await s.forward([1, 2, 3]);
    await expect(s.save(join(tmp, 'g.session'))).rejects.toBeInstanceOf(UnsupportedError);
    expect(readdirSync(tmp).filter((f) => f.startsWith('g.session') || f.includes('g.session.tmp'))).toEqual([]);
    expect(s.length).toBe(3);
  });
});
