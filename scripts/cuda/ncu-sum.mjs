// Sums an `ncu --csv --metrics gpu__time_duration.sum` log by kernel name: the kernels of a run
// with `steps` decode steps minus those of the same run with none (prefill only), per step.
//   node scripts/cuda/ncu-sum.mjs WITH.csv WITHOUT.csv STEPS
import { readFileSync } from 'node:fs';

function parse(file) {
  const by = new Map();
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.includes('gpu__time_duration.sum')) continue;
    const cells = line.match(/"([^"]*)"/g)?.map((c) => c.slice(1, -1));
    if (!cells || cells.length < 15) continue;
    const name = cells[4].replace(/\(.*$/, '').replace(/^void /, '').slice(0, 70);
    const unit = cells[13], value = Number(cells[14].replace(/,/g, ''));
    const us = unit === 'nsecond' || unit === 'ns' ? value / 1e3 : unit === 'usecond' || unit === 'us' ? value : value * 1e3;
    const e = by.get(name) ?? { n: 0, us: 0 };
    e.n += 1;
    e.us += us;
    by.set(name, e);
  }
  return by;
}

const [withFile, withoutFile, stepsArg] = process.argv.slice(2);
const steps = Number(stepsArg);
const a = parse(withFile), b = parse(withoutFile);
const rows = [];
let total = 0;
for (const [name, e] of a) {
  const o = b.get(name) ?? { n: 0, us: 0 };
  const n = (e.n - o.n) / steps, us = (e.us - o.us) / steps;
  if (n <= 0) continue;
  rows.push({ name, n, us });
  total += us;
}
rows.sort((x, y) => y.us - x.us);
for (const r of rows) console.log(`${r.us.toFixed(1).padStart(8)} us  ${r.n.toFixed(1).padStart(6)} launches  ${(r.us / r.n).toFixed(2).padStart(7)} us each  ${r.name}`);
console.log(`${total.toFixed(1).padStart(8)} us  per step in all (kernels timed one at a time: no overlap)`);
