/**
 * A deterministic corpus of malformed safetensors files and checkpoint directories, each with
 * the typed error it must produce (plus a few valid controls that must open). Built at test time
 * into a temp dir by artifacts-corpus.test.ts; nothing here is committed data.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { CorpusCase } from './corpus-types.js';
import { assemble, headerBytes, layout, type HeaderEntry, type TensorSpec } from './safetensors-writer.js';

const BASE: TensorSpec[] = [
  { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [16, 8] },
  { name: 'model.layers.0.self_attn.q_proj.weight', dtype: 'F32', shape: [8, 8] },
  { name: 'model.norm.weight', dtype: 'F16', shape: [8] },
  { name: 'lm_head.scales', dtype: 'U32', shape: [4, 2] },
  { name: 'x.i8', dtype: 'I8', shape: [3, 5] },
  { name: 'y.u8', dtype: 'U8', shape: [7] },
  { name: 'z.i32', dtype: 'I32', shape: [2, 3] },
];
const NAMES = BASE.map((t) => t.name);
/** A dtype of the format whose element size differs from each base tensor's. */
const OTHER_SIZE: Record<string, string> = { BF16: 'F32', F32: 'F16', F16: 'U8', U32: 'I64', I8: 'I16', U8: 'F32', I32: 'F64' };

type Header = Record<string, unknown>;

function baseHeader(): { header: Header; data: Uint8Array } {
  return layout(BASE, { format: 'pt' });
}

function clone(h: Header): Header {
  return JSON.parse(JSON.stringify(h)) as Header;
}

/** Deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Builder {
  readonly cases: CorpusCase[] = [];
  private n = 0;
  constructor(readonly dir: string) {}

  file(group: string, bytes: Uint8Array, error: CorpusCase['error'], field?: CorpusCase['field'] | 'FILE', extra: Partial<CorpusCase> = {}): string {
    const path = join(this.dir, `${group}-${this.n}.safetensors`);
    const id = `${group}#${this.n++}`;
    writeFileSync(path, bytes);
    this.cases.push({ id, group, op: 'weights', path, error, ...(field === undefined ? {} : { field: field === 'FILE' ? path : field }), ...extra });
    return path;
  }

  /** A file from header text (UTF-8, padded) and data. */
  text(group: string, json: string, data: Uint8Array, error: CorpusCase['error'], field?: CorpusCase['field'] | 'FILE', extra: Partial<CorpusCase> = {}): string {
    return this.file(group, assemble(headerBytes(json), data), error, field, extra);
  }

  header(group: string, h: Header, data: Uint8Array, error: CorpusCase['error'], field?: CorpusCase['field'] | 'FILE', extra: Partial<CorpusCase> = {}): string {
    return this.text(group, JSON.stringify(h), data, error, field, extra);
  }

  subdir(group: string): { dir: string; id: string } {
    const dir = join(this.dir, `${group}-${this.n}`);
    mkdirSync(dir, { recursive: true });
    return { dir, id: `${group}#${this.n++}` };
  }
}

function truncations(b: Builder): void {
  const { header, data } = baseHeader();
  const full = assemble(headerBytes(JSON.stringify(header)), data);
  const headerEnd = full.length - data.length;
  const cuts = new Set<number>();
  for (let i = 0; i < headerEnd + 16; i++) cuts.add(i);  // every byte of length field and header
  for (const t of Object.values(header)) {
    const offs = (t as HeaderEntry).data_offsets;
    if (!offs) continue;
    for (const o of offs) for (let d = -2; d <= 2; d++) cuts.add(headerEnd + o + d);
  }
  for (let i = headerEnd; i < full.length; i += 13) cuts.add(i);
  for (const c of [...cuts].filter((c) => c >= 0 && c < full.length).sort((x, y) => x - y))
    b.file('truncated', full.subarray(0, c), 'InvalidFileError', 'FILE');
  for (const extra of [1, 2, 3, 7, 8, 100, 4096]) {
    const longer = new Uint8Array(full.length + extra);
    longer.set(full);
    b.file('appended', longer, 'InvalidFileError', 'FILE');
  }
}

function headerLengths(b: Builder): void {
  const { header, data } = baseHeader();
  const hb = headerBytes(JSON.stringify(header));
  const N = BigInt(hb.length);
  const F = BigInt(8 + hb.length + data.length);
  const values = [
    0n, 1n, 2n, 7n, 8n, N - 1n, N - 2n, N - 8n, N + 1n, N + 2n, N + 8n, F - 8n, F - 7n, F, 100_000_000n, 100_000_001n,
    2n ** 31n, 2n ** 32n, 2n ** 53n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n, 0x0101010101010101n, 0x7b7b7b7b7b7b7b7bn,
  ];
  const r = rng(7);
  for (let i = 0; i < 24; i++) values.push(BigInt(Math.floor(r() * 2 ** 32)) * BigInt(Math.floor(r() * 2 ** 32) + 1));
  for (const v of values) if (v !== N) b.file('header-length', assemble(hb, data, v), 'InvalidFileError', 'FILE');
  // Tiny files, including ones whose 8 bytes claim a zero-length header.
  for (let n = 0; n < 8; n++) b.file('tiny', new Uint8Array(n).fill(0x7b), 'InvalidFileError', 'FILE');
}

const BAD_JSON = [
  '', ' ', '{', '}', '[]', '[{}]', 'null', '0', '"{}"', '{]', '{"a"}', '{"a":}', '{"a":1,}', '{,}', "{'a':1}", '{a:1}',
  '{"a":1}/*c*/', '{}//', '{} {}', '{}x', '{"a":tru}', '{"a":nul}', '{"a":NaN}', '{"a":Infinity}', '{"a":-}', '{"a":01}',
  '{"a":1.}', '{"a":.5}', '{"a":1e}', '{"a":+1}', '{"a":0x10}', '{"a":"\\x41"}', '{"a":"\\u12"}', '{"a":"\\ud800"}',
  '{"a":"\\udc00"}', '{"a":"\\ud800\\u0041"}', '{"a":"tab\there"}', '{"a":"line\nbreak"}', '{"a":"unterminated}',
  '{"a":"x\\"}', '\ufeff{}', '{"a":[1,2}', '{"a":[1,,2]}', '{"a":{"b":1}', ' {}', '\n{}', '{}\u0000', '{"a" 1}',
  '{"a":1 "b":2}', '{"a":"\\u00"}', '{"a":"\u0001"}', '{"a":[}', '{"a":{]}', '{"__metadata__":{"k":"v"}', '{"a":true false}',
  `{"a":${'['.repeat(100)}${']'.repeat(100)}}`, `{"a":${'['.repeat(100000)}`, `{"a":${'{"b":'.repeat(5000)}1${'}'.repeat(5000)}}`,
  '['.repeat(200000), '{"a":-0.0e}', '{"a":1E+}', '{"\\uDBFF\\uDFFF":1', '{"a":"\\/"}}',
];

function badJson(b: Builder): void {
  for (const j of BAD_JSON) b.text('bad-json', j, new Uint8Array(0), 'InvalidFileError', 'FILE');
  // Valid controls: trailing padding of any JSON whitespace is allowed, an empty object is valid.
  for (const j of ['{}', '{} ', '{}\t\n\r ', '{"__metadata__":{}}', '{"__metadata__":null}'])
    b.text('json-ok', j, new Uint8Array(0), null, undefined, { tensors: 0 });
}

const BAD_UTF8 = [[0xff], [0xfe], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80],
  [0xf5, 0x80, 0x80, 0x80], [0x80], [0xc3], [0xe2, 0x82]];

function badUtf8(b: Builder): void {
  const { header, data } = baseHeader();
  const json = JSON.stringify(header);
  const sites = [json.indexOf('embed_tokens'), json.indexOf('"pt"') + 1, json.indexOf('"BF16"') + 2];
  for (const site of sites) {
    for (const seq of BAD_UTF8) {
      const enc = new TextEncoder();
      const hb = new Uint8Array([...enc.encode(json.slice(0, site)), ...seq, ...enc.encode(json.slice(site))]);
      b.file('bad-utf8', assemble(hb, data), 'InvalidFileError', 'FILE');
    }
  }
}

function entryMutations(b: Builder): void {
  const { header, data } = baseHeader();
  for (const name of NAMES) {
    const orig = header[name] as HeaderEntry;
    const [beg, end] = orig.data_offsets;
    const set = (group: string, entry: unknown) => {
      const h = clone(header);
      h[name] = entry;
      b.header(group, h, data, 'InvalidFileError', name);
    };
    const withField = (group: string, key: string, value: unknown) => set(group, { ...orig, [key]: value });
    const without = (key: keyof HeaderEntry) => {
      const e: Record<string, unknown> = { ...orig };
      delete e[key];
      set('entry-missing', e);
    };
    for (const v of ['str', 1, null, [], true, [beg, end]]) set('entry-type', v);
    without('dtype'); without('shape'); without('data_offsets');
    for (const v of [1, null, true, [], {}, 1.5]) withField('dtype-type', 'dtype', v);
    for (const v of ['', 'f32', 'F31', 'FLOAT32', 'Q4_0', 'bf16', ' F32', 'F32 ', 'float', 'BF16\u0000', 'I4', 'F8'])
      withField('dtype-unknown', 'dtype', v);
    withField('dtype-size', 'dtype', OTHER_SIZE[orig.dtype]);
    for (const v of ['x', 1, null, {}, [-1], [1.5], ['8'], [null], [true], [[8]], [-0.5, 2], [1e30], [2 ** 62, 4], [2 ** 32, 2 ** 32], [0], [],
      [...orig.shape, 2], [orig.shape[0]! + 1, ...orig.shape.slice(1)]])
      withField('shape', 'shape', v);
    for (const v of [null, '0', [], [beg], [beg, end, end], [String(beg), String(end)], [-1, end], [beg, -1], [end, beg], [beg + 0.5, end],
      {}, [null, end], [beg, end + 1], [beg, end - 1], [beg + 1, end], 'x'])
      withField('offsets', 'data_offsets', v);
    set('entry-extra-key', { ...orig, extra: 1 });
    set('entry-key-case', { Dtype: orig.dtype, shape: orig.shape, data_offsets: orig.data_offsets });
    // Numbers beyond int64 or written as floats, which JSON.stringify cannot produce.
    const json = JSON.stringify(header);
    const entryText = JSON.stringify(orig);
    for (const [from, to] of [
      [`"shape":${JSON.stringify(orig.shape)}`, '"shape":[9223372036854775808]'],
      [`"shape":${JSON.stringify(orig.shape)}`, '"shape":[9223372036854775807]'],
      [`"shape":${JSON.stringify(orig.shape)}`, `"shape":[${orig.shape.map((d) => `${d}.0`).join(',')}]`],
      [`"shape":${JSON.stringify(orig.shape)}`, `"shape":[${orig.shape.map((d) => `${d}e0`).join(',')}]`],
      [`"data_offsets":[${beg},${end}]`, `"data_offsets":[${beg},${end}.0]`],
      [`"data_offsets":[${beg},${end}]`, `"data_offsets":[${beg},18446744073709551616]`],
      [`"data_offsets":[${beg},${end}]`, `"data_offsets":[-9223372036854775808,${end}]`],
    ]) {
      b.text('raw-number', json.replace(entryText, entryText.replace(from!, to!)), data, 'InvalidFileError', name);
    }
  }
}

function layoutErrors(b: Builder): void {
  const { header, data } = baseHeader();
  const entries = () => NAMES.map((n) => header[n] as HeaderEntry);
  for (const [k, name] of NAMES.entries()) {
    for (const d of [1, 2, 8, -1, -2, -8]) {
      const h = clone(header);
      const e = h[name] as HeaderEntry;
      if (e.data_offsets[0] + d < 0) continue;
      e.data_offsets = [e.data_offsets[0] + d, e.data_offsets[1] + d];
      b.header('layout-shift', h, data, 'InvalidFileError', [...NAMES, 'FILE_PLACEHOLDER']);
    }
    // Drop one entry: a hole where it was (or a short coverage when it was last).
    const h = clone(header);
    delete h[name];
    b.header('layout-drop', h, data, 'InvalidFileError', [...NAMES, 'FILE_PLACEHOLDER']);
    if (k + 1 < NAMES.length && entries()[k]!.data_offsets[1] - entries()[k]!.data_offsets[0] !==
        entries()[k + 1]!.data_offsets[1] - entries()[k + 1]!.data_offsets[0]) {
      const s = clone(header);
      const a = s[name] as HeaderEntry;
      const c = s[NAMES[k + 1]!] as HeaderEntry;
      [a.data_offsets, c.data_offsets] = [c.data_offsets, a.data_offsets];
      b.header('layout-swap', s, data, 'InvalidFileError', [name, NAMES[k + 1]!]);
    }
  }
  const all = clone(header);
  for (const n of NAMES) {
    const e = all[n] as HeaderEntry;
    e.data_offsets = [e.data_offsets[0] + 1, e.data_offsets[1] + 1];
  }
  b.header('layout-all-plus-one', all, data, 'InvalidFileError', [...NAMES, 'FILE_PLACEHOLDER']);
  const far = clone(header);
  const e0 = far[NAMES[0]!] as HeaderEntry;
  e0.data_offsets = [2 ** 53, 2 ** 53 + (e0.data_offsets[1] - e0.data_offsets[0])];
  b.header('layout-far', far, data, 'InvalidFileError', [...NAMES]);
  // Data the header does not cover, or a header claiming more than the data holds.
  b.header('layout-short-data', header, data.subarray(0, data.length - 1), 'InvalidFileError', [...NAMES, 'FILE_PLACEHOLDER']);
  // Valid controls: key order never matters; equal-size tensors may swap places.
  const r = rng(11);
  for (let i = 0; i < 5; i++) {
    const keys = Object.keys(header).sort(() => r() - 0.5);
    const h: Header = {};
    for (const k of keys) h[k] = header[k];
    b.header('layout-ok', h, data, null, undefined, { tensors: NAMES.length });
  }
  const sw = clone(header);
  const a = sw[NAMES[0]!] as HeaderEntry;
  const c = sw[NAMES[1]!] as HeaderEntry;
  [a.data_offsets, c.data_offsets] = [c.data_offsets, a.data_offsets];
  b.header('layout-ok', sw, data, null, undefined, { tensors: NAMES.length });
  for (const cs of b.cases) {
    if (Array.isArray(cs.field)) cs.field = cs.field.map((f) => (f === 'FILE_PLACEHOLDER' ? cs.path : f));
  }
}

function duplicates(b: Builder): void {
  const { header, data } = baseHeader();
  const json = JSON.stringify(header);
  for (const name of NAMES) {
    const piece = `${JSON.stringify(name)}:${JSON.stringify(header[name])}`;
    b.text('duplicate-tensor', json.replace(piece, `${piece},${piece}`), data, 'InvalidFileError', 'FILE');
    const keyDup = piece.replace('"dtype":', `"dtype":"F32","dtype":`);
    b.text('duplicate-key', json.replace(piece, keyDup), data, 'InvalidFileError', 'FILE');
  }
  b.text('duplicate-metadata', json.replace('"__metadata__":{"format":"pt"}', '"__metadata__":{"format":"pt"},"__metadata__":{}'), data, 'InvalidFileError', 'FILE');
  b.text('duplicate-metadata', json.replace('{"format":"pt"}', '{"format":"pt","format":"np"}'), data, 'InvalidFileError', 'FILE');
}

function metadata(b: Builder): void {
  const { header, data } = baseHeader();
  for (const v of [[], 'x', 1, true, { a: 1 }, { a: null }, { a: {} }, { a: ['x'] }, { a: true }, { a: 'ok', b: 2 }]) {
    const h = clone(header);
    h.__metadata__ = v;
    b.header('metadata', h, data, 'InvalidFileError', '__metadata__');
  }
}

function otherDtypes(b: Builder): void {
  const specs: [string, number[], number][] = [
    ['I64', [4], 32], ['F64', [2], 16], ['BOOL', [3], 3], ['I16', [2], 4], ['U16', [5], 10], ['U64', [1], 8],
    ['F8_E4M3', [6], 6], ['F8_E5M2', [2, 2], 4], ['F8_E8M0', [3], 3], ['C64', [1], 8], ['F4', [4], 2], ['F6_E2M3', [4], 3], ['F6_E3M2', [8], 6],
  ];
  const h: Header = {};
  let at = 0;
  for (const [dt, shape, n] of specs) {
    h[`t.${dt}`] = { dtype: dt, shape, data_offsets: [at, at + n] };
    at += n;
  }
  const path = b.header('other-dtypes', h, new Uint8Array(at), null, undefined, { tensors: specs.length });
  for (const [dt] of specs)
    b.cases.push({ id: `other-dtypes-read#${dt}`, group: 'other-dtypes-read', op: 'tensor', path, name: `t.${dt}`, error: 'UnsupportedError', field: `t.${dt}` });
  b.cases.push({ id: 'missing-tensor#0', group: 'missing-tensor', op: 'tensor', path, name: 'nope', error: 'InvalidFileError', field: 'nope' });
  // Sub-byte dtypes must fill whole bytes.
  b.header('sub-byte', { t: { dtype: 'F4', shape: [3], data_offsets: [0, 2] } }, new Uint8Array(2), 'InvalidFileError', 't');
  b.header('sub-byte', { t: { dtype: 'F6_E2M3', shape: [5], data_offsets: [0, 4] } }, new Uint8Array(4), 'InvalidFileError', 't');
}

export function buildSafetensorsCorpus(dir: string): CorpusCase[] {
  const b = new Builder(dir);
  truncations(b);
  headerLengths(b);
  badJson(b);
  badUtf8(b);
  entryMutations(b);
  layoutErrors(b);
  duplicates(b);
  metadata(b);
  otherDtypes(b);
  return b.cases;
}

export { Builder as SafetensorsCorpusBuilder, BASE as CORPUS_BASE_TENSORS };
