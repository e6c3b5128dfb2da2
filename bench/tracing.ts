/**
 * W1 (backlog drain into NATS JetStream, one relay process) with tracing off and on, paired:
 * each round runs every mode once, in turn, so drift on a shared machine hits them alike.
 *
 *   npx tsx bench/tracing.ts --quick            # 10,000 events, 3 rounds
 *   npx tsx bench/tracing.ts --events 50000 --runs 5
 *   npx tsx bench/tracing.ts --quick --modes base,off --base /tmp/txo-base   # zero-cost check
 *
 * First, in this process, what the relay's tracing costs per publish call: the check with no
 * provider registered, and per message with one (start, inject, end into a NoopSpanProcessor).
 *
 * Modes: `off` (no tracer provider: the zero-cost path), `noop` (an SDK whose spans end in a
 * NoopSpanProcessor), `batch` (a BatchSpanProcessor, exporter dropping the batch) and `nocm`
 * (`noop` without the AsyncLocalStorage context manager); see
 * bench/tracing-sdk.mjs. `base`: the relay process of another checkout (`--base`, built, e.g. the
 * commit before tracing: `git archive <commit> | tar -x -C /tmp/txo-base`, node_modules linked,
 * `npm run build` there), no provider. Needs `npm run build` (the relay process runs dist/).
 */
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, NoopSpanProcessor } from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import type { OutboxMessage } from '../src/publishers/contract.js';
import { PublishTracing } from '../src/tracing/publish-spans.js';
import { DATABASE_URL, fmt, summarize } from './lib.js';
import { txOutboxSystem } from './systems/tx-outbox.js';
import { drainRun } from './workloads/drain.js';

const { values: args } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    events: { type: 'string' },
    runs: { type: 'string' },
    modes: { type: 'string', default: 'off,noop,batch' },
    base: { type: 'string' },
  },
});
const events = Number(args.events ?? (args.quick ? 10_000 : 50_000));
const runs = Number(args.runs ?? 3);
const modes = args.modes.split(',').map((m) => m.trim());
await inProcessCost();

/** Nanoseconds per publish call with no provider; microseconds per message with one. */
async function inProcessCost(): Promise<void> {
  const tracing = new PublishTracing('nats');
  await tracing.ready();
  const batch: OutboxMessage[] = Array.from({ length: 1000 }, (_, i) => ({
    id: String(i),
    eventId: crypto.randomUUID(),
    aggregateType: 'order',
    aggregateId: `a${i}`,
    sequence: 1,
    type: 'order.placed',
    schemaVersion: 1,
    topic: null,
    payload: new Uint8Array(300),
    contentType: 'application/json',
    headers: { traceparent: `00-${'1'.repeat(32)}-${'2'.repeat(16)}-01`, 'x-tenant': 't1' },
    createdAt: new Date(),
    attempts: 0,
  }));
  const outcomes = batch.map(() => ({ ok: true }) as const);
  const calls = 1_000_000;
  let started = performance.now();
  for (let i = 0; i < calls; i++) if (tracing.start(batch) !== undefined) throw new Error('traced');
  const offNs = ((performance.now() - started) * 1e6) / calls;
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new NoopSpanProcessor()] }));
  const rounds = 20;
  for (let i = 0; i < rounds; i++) tracing.start(batch)!.end(outcomes); // warm-up
  started = performance.now();
  for (let i = 0; i < rounds; i++) tracing.start(batch)!.end(outcomes);
  const onUs = ((performance.now() - started) * 1000) / (rounds * batch.length);
  // For scale: a bare SDK span, started and ended, on this machine now.
  const tracer = trace.getTracer('bench');
  for (let i = 0; i < rounds * batch.length; i++) tracer.startSpan('bare').end();
  started = performance.now();
  for (let i = 0; i < rounds * batch.length; i++) tracer.startSpan('bare').end();
  const bareUs = ((performance.now() - started) * 1000) / (rounds * batch.length);
  trace.disable();
  console.log(
    `In process: no provider ${offNs.toFixed(0)} ns per publish call; with a provider ` +
      `${onUs.toFixed(1)} µs per message (span, headers, end), a bare SDK span ${bareUs.toFixed(1)} µs.`,
  );
}

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 12 });
const rates: Record<string, number[]> = Object.fromEntries(modes.map((m) => [m, []]));
try {
  for (let round = 0; round < runs; round++) {
    for (const mode of modes) {
      delete process.env['TXO_BENCH_TRACING'];
      delete process.env['TXO_BENCH_RELAY_PROCESS'];
      if (mode === 'base') {
        if (!args.base) throw new Error('mode base needs --base <checkout>');
        process.env['TXO_BENCH_RELAY_PROCESS'] = join(args.base, 'bench', 'relay-process.mjs');
      } else if (mode !== 'off') process.env['TXO_BENCH_TRACING'] = mode;
      const run = await drainRun(pool, txOutboxSystem(), {
        events,
        aggregates: Math.max(1, Math.round(events / 10)),
        payloadBytes: 300,
        relays: 1,
      });
      rates[mode]!.push(run.perSecond);
      console.error(`round ${round + 1} ${mode}: ${fmt(run.perSecond)} events/s`);
    }
  }
} finally {
  delete process.env['TXO_BENCH_TRACING'];
  delete process.env['TXO_BENCH_RELAY_PROCESS'];
  await pool.end();
}
if (runs === 0) process.exit(0);
const reference = modes[0]!;
const first = summarize(rates[reference]!);
console.log(`W1, ${fmt(events)} events, ${runs} paired rounds; events/s median [min–max]`);
console.log(`| tracing | events/s | vs ${reference} |`);
console.log('|---|---|---|');
for (const mode of modes) {
  const s = summarize(rates[mode]!);
  const ratio = (s.median / first.median).toFixed(2);
  console.log(`| ${mode} | ${fmt(s.median)} [${fmt(s.min)}–${fmt(s.max)}] | ${ratio} |`);
}
