// The README's test command: runs vitest (forked workers), then prints one summary line
// "N passed, N failed" that CI reads, and exits non-zero on any failure or on zero tests.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const dir = mkdtempSync(join(tmpdir(), 'mlxb-test-'));
const report = join(dir, 'report.json');
const args = ['vitest', 'run', '--reporter=default', '--reporter=json', `--outputFile.json=${report}`, ...process.argv.slice(2)];
const r = spawnSync('npx', args, { stdio: 'inherit' });
let passed = 0;
let failed = 0;
try {
  const j = JSON.parse(readFileSync(report, 'utf8'));
  passed = j.numPassedTests ?? 0;
  failed = (j.numFailedTests ?? 0) + (j.numFailedTestSuites ?? 0);
} catch {
  failed += 1;  // vitest died before writing its report
}
rmSync(dir, { recursive: true, force: true });
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 || r.status !== 0 || passed === 0 ? 1 : 0);
