// One tx-outbox relay in its own process, for the benchmarks (built package, dist/).
// Config in TXO_BENCH_RELAY (JSON): { databaseUrl, schema, natsUrl, stream, batchSize, relayId, history,
// source: 'poll' (default) | 'cdc', applicationName (of every connection, for bench/cpu.ts), leaseMs,
// silenceTimeoutMs (cdc) }.
// On SIGTERM: stops gracefully and prints one JSON line { stats, peakRssMb } to stdout.
// TXO_BENCH_TRACING=noop|batch registers an OpenTelemetry SDK first (bench/tracing-sdk.mjs).
import { readFileSync } from 'node:fs';
import pg from 'pg';
// A namespace import: createCdcRelay may be missing from an older build (TXO_BENCH_RELAY_PROCESS).
import * as txo from '../dist/index.js';
import { natsPublisher } from '../dist/publishers/nats/index.js';
import { benchRelayOptions, serveBenchRelay } from './relay-config.mjs';

if (process.env.TXO_BENCH_TRACING) {
  const { registerBenchTracing } = await import('./tracing-sdk.mjs');
  registerBenchTracing(process.env.TXO_BENCH_TRACING);
}
const cfg = JSON.parse(process.env.TXO_BENCH_RELAY ?? '{}');
const pool = new pg.Pool({
  connectionString: cfg.databaseUrl,
  // The CDC relay keeps four connections and borrows up to two more (src/cdc/options.ts).
  max: cfg.source === 'cdc' ? 6 : 4,
  ...(cfg.applicationName ? { application_name: cfg.applicationName } : {}),
});
const publisher = natsPublisher({
  url: cfg.natsUrl,
  stream: cfg.stream,
  ...(cfg.mode ? { mode: cfg.mode } : {}),
});
if (cfg.source === 'cdc' && typeof txo.createCdcRelay !== 'function') {
  throw new Error('this build has no createCdcRelay (the CDC relay)');
}
const relay = (cfg.source === 'cdc' ? txo.createCdcRelay : txo.createRelay)({
  pool,
  publisher,
  ...benchRelayOptions(cfg),
});

function peakRssMb() {
  const status = readFileSync('/proc/self/status', 'utf8');
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return Math.round(kb / 1024);
}

await serveBenchRelay(relay, publisher, pool, () =>
  process.stdout.write(`${JSON.stringify({ stats: relay.stats(), peakRssMb: peakRssMb() })}\n`),
);
