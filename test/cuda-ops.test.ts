// Opt-in GPU check (MLXB_TEST_CUDA=1): runs the native backend-consistency program, which tests
// every CUDA op against float64 references and the CPU backend (test/native/cuda_ops_check.cc),
// the quantized ops (test/native/cuda_quant_check.cc) and the fused decode ops, bit for bit
// against the ops they fuse (test/native/cuda_fused_check.cc).
// On the GPU machine without vitest, run `bash scripts/cuda/ops-check.sh` instead.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

import { native } from '../lib/native/index.js';

const enabled = process.env.MLXB_TEST_CUDA === '1';

describe.skipIf(!enabled)('cuda backend consistency', () => {
  it('the build has a usable CUDA backend', () => {
    const info = native().buildInfo();
    expect(info.cudaBuilt).toBe(true);
    expect(info.cudaAvailable).toBe(true);
  });
  it('every op agrees with the references', () => {
    const exe = join(import.meta.dirname, '..', 'build', 'cuda_ops_check');
    expect(existsSync(exe)).toBe(true);
    const r = spawnSync(exe, [], { encoding: 'utf8', timeout: 600_000 });
    expect(r.stdout).toMatch(/PASSED: 0 failure/);
    expect(r.status).toBe(0);
  }, 600_000);
  it('quantized ops agree with the CPU reference (every bit width, group size, dtype)', () => {
    const exe = join(import.meta.dirname, '..', 'build', 'cuda_quant_check');
    expect(existsSync(exe)).toBe(true);
    const r = spawnSync(exe, [], { encoding: 'utf8', timeout: 600_000 });
    expect(r.stdout).toMatch(/PASSED: 0 failure/);
    expect(r.status).toBe(0);
  }, 600_000);
  it('fused decode ops equal the ops they fuse, bit for bit', () => {
    const exe = join(import.meta.dirname, '..', 'build', 'cuda_fused_check');
    expect(existsSync(exe)).toBe(true);
    const r = spawnSync(exe, [], { encoding: 'utf8', timeout: 600_000 });
    expect(r.stdout).toMatch(/PASSED: 0 failure/);
    expect(r.status).toBe(0);
  }, 600_000);
});
