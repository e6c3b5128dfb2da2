/**
 * W2's measuring consumer in a process of its own (bench/workloads/latency-ends.ts, `consume`):
 * nothing else runs on its event loop, so a receipt is timed when it arrives. Config in
 * TXO_BENCH_CONSUMER (JSON): { natsUrl, stream, out }. Prints {"started":true} once consuming,
 * {"count":n} every 100 ms while the count grows; on SIGTERM writes { received: [[id, ms], …],
 * loopDelayP99 } to `out` and prints {"done":true}.
 */
import { writeFileSync } from 'node:fs';
import { connect } from '@nats-io/transport-node';
import { consume } from './workloads/latency-ends.js';

const cfg = JSON.parse(process.env['TXO_BENCH_CONSUMER'] ?? '{}') as {
  natsUrl: string;
  stream: string;
  out: string;
};
const nc = await connect({ servers: cfg.natsUrl });
const consuming = await consume(nc, cfg.stream);
process.stdout.write(`${JSON.stringify({ started: true })}\n`);
let reported = 0;
const ticker = setInterval(() => {
  const n = consuming.received.size;
  if (n !== reported) process.stdout.write(`${JSON.stringify({ count: n })}\n`);
  reported = n;
}, 100);
process.on('SIGTERM', async () => {
  clearInterval(ticker);
  const { loopDelayP99 } = await consuming.stop();
  await nc.close();
  writeFileSync(cfg.out, JSON.stringify({ received: [...consuming.received], loopDelayP99 }));
  process.stdout.write(`${JSON.stringify({ done: true })}\n`);
  process.exit(0);
});
