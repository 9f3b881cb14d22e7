// Valid checkpoints written by the independent TS writer read back with the right names, dtypes,
// shapes and bytes; directory forms (single file, model.safetensors, sharded index) resolve; the
// zero-copy and owned read paths return the same bytes.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

import { afterAll, describe, expect, it } from 'vitest';

import { inspectCheckpoint, inspectWeights, readTensor } from '../lib/artifacts/index.js';
import { InvalidArgumentError, InvalidFileError, IoError, UnsupportedError } from '../lib/errors.js';
import { native } from '../lib/native/index.js';
import {
  bf16Bytes, encodeSafetensors, f16Bytes, f32Bytes, fillerBytes, i32Bytes, i8Bytes, u32Bytes,
  writeSafetensors, writeSharded, type TensorSpec,
} from './support/safetensors-writer.js';

const root = mkdtempSync(join(tmpdir(), 'mlxb-artifacts-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

let n = 0;
function fresh(name = 'case'): string {
  const d = join(root, `${name}-${n++}`);
  mkdirSync(d, { recursive: true });
  return d;
}

const tinyLlama = {
  model_type: 'llama', vocab_size: 16, hidden_size: 8, intermediate_size: 12, num_hidden_layers: 1,
  num_attention_heads: 2, num_key_value_heads: 1, max_position_embeddings: 64, rms_norm_eps: 1e-5,
  torch_dtype: 'bfloat16',
};

const allDtypes: TensorSpec[] = [
  { name: 'f32', dtype: 'F32', shape: [2, 3], data: f32Bytes([1, -2.5, 3.25, 0, 1e-8, -7e20]) },
  { name: 'bf16', dtype: 'BF16', shape: [4], data: bf16Bytes([1, -0.5, 3.140625, 65280]) },
  { name: 'f16', dtype: 'F16', shape: [2, 2], data: f16Bytes([1, -2, 0.5, 65504]) },
  { name: 'i32', dtype: 'I32', shape: [3], data: i32Bytes([-1, 2147483647, -2147483648]) },
  { name: 'u32', dtype: 'U32', shape: [1, 2], data: u32Bytes([0xffffffff, 7]) },
  { name: 'u8', dtype: 'U8', shape: [5], data: Uint8Array.from([0, 1, 128, 254, 255]) },
  { name: 'i8', dtype: 'I8', shape: [3, 1], data: i8Bytes([-128, 0, 127]) },
];

describe('safetensors: valid files', () => {
  it('reads every usable dtype with names, shapes, bytes and metadata', async () => {
    const file = join(fresh(), 'all.safetensors');
    writeSafetensors(file, allDtypes, { format: 'pt', note: 'ünïcode ✓' });
    const info = await native().inspectWeights(file);
    expect(info.files).toEqual([file]);
    expect(info.metadata).toEqual({ format: 'pt', note: 'ünïcode ✓' });
    expect(info.tensors.map((t) => t.name)).toEqual([...allDtypes.map((t) => t.name)].sort());
    for (const spec of allDtypes) {
      const t = info.tensors.find((x) => x.name === spec.name)!;
      expect(t.dtype).toBe(spec.dtype);
      expect(t.shape).toEqual(spec.shape);
      expect(t.nbytes).toBe(spec.data!.length);
      const got = await native().readTensor(file, spec.name);
      expect(new Uint8Array(got.data)).toEqual(spec.data);
      expect(new Uint8Array(got.mapped)).toEqual(spec.data);
      expect(got.ownedAligned).toBe(true);
    }
    expect(info.totalBytes).toBe(allDtypes.reduce((a, t) => a + t.data!.length, 0));
  });

  it('bf16 and f16 bytes decode to the written values', async () => {
    const file = join(fresh(), 'half.safetensors');
    writeSafetensors(file, allDtypes.slice(1, 3));
    const bf = await readTensor(file, 'bf16');
    const u16 = new Uint16Array(bf.data.buffer, bf.data.byteOffset, 4);
    const asF32 = Array.from(u16, (h) => new Float32Array(new Uint32Array([h << 16]).buffer)[0]);
    expect(asF32).toEqual([1, -0.5, 3.140625, 65280]);
    const f16 = await readTensor(file, 'f16');
    expect(Array.from(new Uint16Array(f16.data.buffer, f16.data.byteOffset, 4))).toEqual([0x3c00, 0xc000, 0x3800, 0x7bff]);
  });

  it('accepts an unpadded header, zero-size and scalar tensors, and any key order', async () => {
    const file = join(fresh(), 'odd.safetensors');
    const tensors: TensorSpec[] = [
      { name: 'z', dtype: 'F32', shape: [0, 4] },
      { name: 'scalar', dtype: 'F32', shape: [], data: f32Bytes([42]) },
      { name: 'b', dtype: 'BF16', shape: [3] },
      { name: 'a', dtype: 'U8', shape: [1] },
    ];
    writeSafetensors(file, tensors, undefined, { pad: false });
    const info = await native().inspectWeights(file);
    expect(info.tensors.map((t) => [t.name, t.shape, t.nbytes])).toEqual([
      ['a', [1], 1], ['b', [3], 6], ['scalar', [], 4], ['z', [0, 4], 0],
    ]);
    const s = await native().readTensor(file, 'scalar');
    expect(new Float32Array(s.data)[0]).toBe(42);
    expect(s.ownedAligned).toBe(true);
    const z = await native().readTensor(file, 'z');
    expect(z.data.byteLength).toBe(0);
  });

  it('an empty checkpoint ({} and no data) is valid', async () => {
    const file = join(fresh(), 'empty.safetensors');
    writeSafetensors(file, []);
    const info = await native().inspectWeights(file);
    expect(info.tensors).toEqual([]);
    expect(info.totalBytes).toBe(0);
  });

  it('opens a file holding other format dtypes but refuses to read them', async () => {
    const file = join(fresh(), 'mixed.safetensors');
    writeSafetensors(file, [
      { name: 'pos', dtype: 'I64', shape: [4] },
      { name: 'w', dtype: 'F32', shape: [2] },
      { name: 'flag', dtype: 'BOOL', shape: [3] },
    ]);
    const info = await native().inspectWeights(file);
    expect(info.tensors.map((t) => `${t.name}:${t.dtype}:${t.nbytes}`)).toEqual(['flag:BOOL:3', 'pos:I64:32', 'w:F32:8']);
    await expect(readTensor(file, 'pos')).rejects.toMatchObject({ constructor: UnsupportedError, field: 'pos' });
    await expect(readTensor(file, 'nope')).rejects.toMatchObject({ constructor: InvalidFileError, field: 'nope' });
    expect((await readTensor(file, 'w')).data.length).toBe(8);
  });
});

describe('checkpoint directories', () => {
  it('inspects model.safetensors with its config', async () => {
    const dir = fresh();
    writeFileSync(join(dir, 'config.json'), JSON.stringify(tinyLlama));
    writeSafetensors(join(dir, 'model.safetensors'), [
      { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [16, 8] },
      { name: 'model.norm.weight', dtype: 'F32', shape: [8] },
    ]);
    const ck = await inspectCheckpoint(dir);
    expect(ck.config.modelType).toBe('llama');
    expect(ck.shards).toEqual(['model.safetensors']);
    expect(ck.parameterCount).toBe(16 * 8 + 8);
    expect(ck.totalBytes).toBe(16 * 8 * 2 + 32);
    expect(ck.dtype).toBe('BF16');
    expect(ck.tensors[0]).toEqual({ name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [16, 8], nbytes: 256, shard: 'model.safetensors' });
  });

  it('resolves a sharded index, including a symlinked shard inside the directory', async () => {
    const dir = fresh();
    writeFileSync(join(dir, 'config.json'), JSON.stringify(tinyLlama));
    const shards: Record<string, TensorSpec[]> = {
      'model-00001-of-00002.safetensors': [
        { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [16, 8] },
        { name: 'model.layers.0.mlp.up_proj.weight', dtype: 'BF16', shape: [12, 8] },
      ],
      'model-00002-of-00002.safetensors': [
        { name: 'model.norm.weight', dtype: 'F32', shape: [8], data: f32Bytes([1, 2, 3, 4, 5, 6, 7, 8]) },
        { name: 'lm_head.weight', dtype: 'BF16', shape: [16, 8] },
      ],
    };
    writeSharded(dir, shards, { format: 'pt' });
    const ck = await inspectCheckpoint(dir);
    expect(ck.shards).toEqual(Object.keys(shards));
    expect(ck.tensors.map((t) => `${t.name}@${t.shard}`)).toEqual([
      'lm_head.weight@model-00002-of-00002.safetensors',
      'model.embed_tokens.weight@model-00001-of-00002.safetensors',
      'model.layers.0.mlp.up_proj.weight@model-00001-of-00002.safetensors',
      'model.norm.weight@model-00002-of-00002.safetensors',
    ]);
    expect(ck.parameterCount).toBe(16 * 8 * 2 + 12 * 8 + 8);
    expect(ck.metadata).toEqual({ format: 'pt' });
    const norm = await readTensor(dir, 'model.norm.weight');
    expect(Array.from(new Float32Array(norm.data.buffer, norm.data.byteOffset, 8))).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);

    // HF caches keep shards as symlinks to blobs elsewhere: the name is what is confined.
    const linked = fresh();
    const blobs = fresh('blobs');
    writeFileSync(join(linked, 'config.json'), JSON.stringify(tinyLlama));
    writeSharded(blobs, shards);
    for (const f of [...Object.keys(shards), 'model.safetensors.index.json']) symlinkSync(join(blobs, f), join(linked, f));
    expect((await inspectCheckpoint(linked)).tensors.length).toBe(4);
  });

  it('counts MLX-packed weights as unpacked parameters', async () => {
    const dir = fresh();
    writeFileSync(join(dir, 'config.json'), JSON.stringify({
      ...tinyLlama, quantization: { group_size: 32, bits: 4, 'model.layers.0.mlp.up_proj': { group_size: 32, bits: 8 } },
    }));
    writeSafetensors(join(dir, 'model.safetensors'), [
      { name: 'model.embed_tokens.weight', dtype: 'U32', shape: [16, 4] },  // 32 inputs at 4 bits
      { name: 'model.embed_tokens.scales', dtype: 'BF16', shape: [16, 1] },
      { name: 'model.embed_tokens.biases', dtype: 'BF16', shape: [16, 1] },
      { name: 'model.layers.0.mlp.up_proj.weight', dtype: 'U32', shape: [12, 8] },  // 32 inputs at 8 bits
      { name: 'model.layers.0.mlp.up_proj.scales', dtype: 'BF16', shape: [12, 1] },
      { name: 'model.layers.0.mlp.up_proj.biases', dtype: 'BF16', shape: [12, 1] },
      { name: 'model.norm.weight', dtype: 'BF16', shape: [32] },
    ]);
    const ck = await inspectCheckpoint(dir);
    expect(ck.config.quantization).toEqual({ bits: 4, groupSize: 32 });
    expect(ck.parameterCount).toBe(16 * 32 + 12 * 32 + 32);
    expect(ck.dtype).toBe('BF16');
  });

  it('picks the only .safetensors file of a directory and refuses ambiguity', async () => {
    const one = fresh();
    writeSafetensors(join(one, 'consolidated.safetensors'), [{ name: 'w', dtype: 'F32', shape: [1] }]);
    expect((await native().inspectWeights(one)).tensors.map((t) => t.name)).toEqual(['w']);
    writeSafetensors(join(one, 'other.safetensors'), [{ name: 'v', dtype: 'F32', shape: [1] }]);
    await expect(native().inspectWeights(one)).rejects.toBeInstanceOf(InvalidFileError);
    await expect(native().inspectWeights(fresh())).rejects.toBeInstanceOf(IoError);
    await expect(native().inspectWeights(join(root, 'does-not-exist'))).rejects.toBeInstanceOf(IoError);
  });

  it('owned copy and mapped view agree over several pages with an unaligned start', async () => {
    const file = join(fresh(), 'big.safetensors');
    const bytes = fillerBytes(3 * 4096 * 4 + 12, 9);  // several pages, unaligned tail
    writeFileSync(file, encodeSafetensors([{ name: 'pad', dtype: 'U8', shape: [3] }, { name: 'w', dtype: 'U8', shape: [bytes.length], data: bytes }]));
    const t = await native().readTensor(file, 'w');
    expect(Buffer.compare(Buffer.from(t.data), Buffer.from(bytes))).toBe(0);
    expect(Buffer.compare(Buffer.from(t.mapped), Buffer.from(bytes))).toBe(0);
  });

  it('inspectWeights needs no config.json and reports the working dtype', async () => {
    const file = join(fresh(), 'w.safetensors');
    writeSafetensors(file, [
      { name: 'big.u8', dtype: 'U8', shape: [100] },
      { name: 'w', dtype: 'F16', shape: [4] },
      { name: 'v', dtype: 'F32', shape: [1] },
    ], { format: 'mlx' });
    const w = await inspectWeights(file);
    expect(w.shards).toEqual(['w.safetensors']);
    expect(w.dtype).toBe('F16');  // float dtypes win over integer buffers, then bytes decide
    expect(w.totalBytes).toBe(100 + 8 + 4);
    expect(w.metadata).toEqual({ format: 'mlx' });
    expect(w.tensors.map((t) => t.name)).toEqual(['big.u8', 'v', 'w']);
    await expect(inspectCheckpoint(dirname(file))).rejects.toBeInstanceOf(IoError);  // no config.json
  });

  it('validates its arguments in TypeScript', async () => {
    await expect(inspectCheckpoint('')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(readTensor('a\0b', 'x')).rejects.toMatchObject({ field: 'path' });
  });
});
