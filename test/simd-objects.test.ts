// The CPU SIMD files (*_avx2.cc, *_avx512.cc) are compiled with -mavx2 / -mavx512* while the
// rest of the addon is not. Any function such a file emits as a weak (COMDAT) symbol — an inline
// function or template instantiation not inlined everywhere, std:: ones included — may be the copy
// the linker keeps for every caller, and then code built for AVX-512 runs on a CPU without it
// (SIGILL, a crash of the host process). This test reads the symbol tables of the built SIMD
// objects (build/ from `npm run build`) and fails on any weak definition; helpers shared between
// those files belong in an anonymous namespace (internal linkage), as backend/cpu/qmatmul_simd.h does.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { packageRoot } from '../lib/native/index.js';

const OBJ_DIR = join(packageRoot, 'build', 'CMakeFiles', 'mlxb_cpu.dir', 'cpp', 'backend', 'cpu');

/** Weak definitions in an object file (nm types W and V), except the unwinder's personality reference. */
function weakDefinitions(obj: string): string[] {
  const r = spawnSync('nm', ['--defined-only', obj], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`nm ${obj}: ${r.stderr || r.error?.message}`);
  const out: string[] = [];
  for (const line of r.stdout.split('\n')) {
    const m = /^[0-9a-f]*\s+([A-Za-z])\s+(\S+)$/.exec(line.trim());
    if (m && (m[1] === 'W' || m[1] === 'V') && !m[2]!.startsWith('DW.ref.')) out.push(m[2]!);
  }
  return out;
}

describe('SIMD objects export no weak definitions', () => {
  it('the checker sees an out-of-line inline function (self-check on a compiled probe)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mlxb-simd-probe-'));
    try {
      const src = join(dir, 'probe.cc');
      writeFileSync(src, 'inline int twice(int x) { return 2 * x; }\nint (*take())(int) { return &twice; }\n');
      const r = spawnSync('g++', ['-O2', '-mavx2', '-c', src, '-o', join(dir, 'probe.o')], { encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
      expect(weakDefinitions(join(dir, 'probe.o'))).toEqual(['_Z5twicei']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('every *_avx2 / *_avx512 object of the CPU backend', () => {
    expect(existsSync(OBJ_DIR), `${OBJ_DIR} is written by npm run build`).toBe(true);
    const objs = readdirSync(OBJ_DIR).filter((f) => /_avx(2|512)\.cc\.o$/.test(f));
    expect(objs.some((f) => f.includes('_avx2.')) && objs.some((f) => f.includes('_avx512.'))).toBe(true);
    const found = objs.flatMap((f) => weakDefinitions(join(OBJ_DIR, f)).map((s) => `${f}: ${s}`));
    expect(found).toEqual([]);
  });
});
