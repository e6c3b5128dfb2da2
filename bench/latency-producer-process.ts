/**
 * W2's producers in a process of their own (bench/workloads/latency-ends.ts, `produce`), so that
 * neither the measuring consumer nor the harness shares their event loop. Config in
 * TXO_BENCH_PRODUCERS (JSON): ProduceOptions and `out`, a file for the result. Prints
 * {"started":true} once its connections are open, starts the schedule on SIGUSR2, writes the
 * result ({ committed, seconds, lateness, loopDelayP99 }) to `out` and prints {"done":true}.
 */
import { writeFileSync } from 'node:fs';
import { type ProduceOptions, produce } from './workloads/latency-ends.js';

const cfg = JSON.parse(process.env['TXO_BENCH_PRODUCERS'] ?? '{}') as ProduceOptions & { out: string };
const go = new Promise<void>((resolve) => process.once('SIGUSR2', () => resolve()));
const result = await produce(cfg, async () => {
  process.stdout.write(`${JSON.stringify({ started: true })}\n`);
  await go;
});
writeFileSync(cfg.out, JSON.stringify(result));
process.stdout.write(`${JSON.stringify({ done: true })}\n`);
process.exit(0);
