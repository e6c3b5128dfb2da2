/**
 * Per broker: events/s of the tx-outbox relay draining a backlog, next to the broker's own
 * publish ceiling from a raw client loop (same client library, same delivery guarantee, same
 * payloads and envelope headers), measured in the same run, interleaved.
 *
 *   npx tsx bench/brokers.ts [--events 100000] [--only nats,kafka] [--runs 3]
 *
 * Relay drain: a fresh schema, N events over 5,000 aggregates (~300-byte JSON payloads) enqueued
 * in transactions of 1,000, then `createRelay({ batchSize: 1000 })` in this process with the
 * broker's publisher, timed from `relay.start()` until the outbox is empty. Raw ceiling: the
 * same N messages through a tight client loop, timed from the first publish to the last ack.
 * Every run checks that the destination holds all N messages. Writes
 * bench/results/brokers-<timestamp>.{md,json}.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createRelay } from '../src/index.js';
import {
  ADAPTERS,
  type BrokerAdapter,
  listening,
  outboxMessages,
  type Workload,
} from './brokers/adapters.js';
import { benchContext, DATABASE_URL, fmt, machine, type Summary, summarize } from './lib.js';
import { loadOutbox, pendingCount } from './systems/tx-outbox.js';

const { values: args } = parseArgs({
  options: {
    events: { type: 'string', default: '100000' },
    only: { type: 'string' },
    runs: { type: 'string', default: '3' },
  },
});
const workload: Workload = { events: Number(args.events), aggregates: 5000, payloadBytes: 300 };
const RUNS = Number(args.runs);
const selected = args.only === undefined ? Object.keys(ADAPTERS) : args.only.split(',').map((s) => s.trim());
for (const name of selected) {
  if (ADAPTERS[name] === undefined) {
    throw new Error(`unknown broker "${name}"; choose from ${Object.keys(ADAPTERS).join(', ')}`);
  }
}

const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 10 });

interface BrokerResult {
  readonly broker: string;
  readonly skipped?: string;
  readonly note?: string;
  readonly relaySeconds: number[];
  readonly rawSeconds: number[];
  relay?: Summary;
  raw?: Summary;
  ratio?: number;
  readonly checks: string[];
}

async function relayDrain(adapter: BrokerAdapter, result: BrokerResult): Promise<number> {
  const ctx = await benchContext(pool);
  try {
    const dest = await adapter.destination(ctx);
    try {
      await loadOutbox(ctx, { ...workload, relays: 1 });
      const relayPool = new pg.Pool({ connectionString: DATABASE_URL, max: 4 });
      const publisher = dest.publisher();
      const relay = createRelay({ pool: relayPool, publisher, schema: ctx.schema, batchSize: 1000 });
      const started = performance.now();
      let seconds: number;
      try {
        await relay.start();
        while ((await pendingCount(ctx)) > 0) await new Promise((r) => setTimeout(r, 20));
        seconds = (performance.now() - started) / 1000;
      } finally {
        await relay.stop({ timeout: 10_000 });
        await publisher.close();
        await relayPool.end();
      }
      const stats = relay.stats();
      const stored = await dest.stored();
      if (stats.published !== workload.events || stats.dead > 0) {
        throw new Error(`relay published ${stats.published}, dead ${stats.dead} (${stats.lastError ?? ''})`);
      }
      if (stats.retried > 0 || stats.unavailable > 0) {
        result.checks.push(`relay run: ${stats.retried} retried, ${stats.unavailable} unavailable`);
      }
      if (stored !== workload.events) {
        result.checks.push(`relay run: destination holds ${stored} messages, expected ${workload.events}`);
      }
      return seconds;
    } finally {
      await dest.cleanup();
    }
  } finally {
    await ctx.close();
  }
}

async function rawCeiling(adapter: BrokerAdapter, result: BrokerResult): Promise<number> {
  const ctx = await benchContext(pool);
  try {
    const dest = await adapter.destination(ctx);
    try {
      const messages = outboxMessages(dest.topic, workload);
      const seconds = await adapter.raw(ctx, dest, messages, workload);
      const stored = await dest.stored();
      if (stored !== workload.events) {
        result.checks.push(`raw run: destination holds ${stored} messages, expected ${workload.events}`);
      }
      return seconds;
    } finally {
      await dest.cleanup();
    }
  } finally {
    await ctx.close();
  }
}

const rate = (seconds: number): number => workload.events / seconds;
const range = (s: Summary): string => `${fmt(s.median)} (${fmt(s.min)}–${fmt(s.max)})`;

async function main(): Promise<void> {
  const startedAt = new Date();
  const results: BrokerResult[] = [];
  for (const key of selected) {
    const adapter = ADAPTERS[key]!;
    const result: BrokerResult = {
      broker: adapter.name,
      ...(adapter.note === undefined ? {} : { note: adapter.note }),
      relaySeconds: [],
      rawSeconds: [],
      checks: [],
    };
    if (!(await listening(adapter.address))) {
      results.push({ ...result, skipped: `nothing listens on ${adapter.address}` });
      console.log(`${adapter.name}: skipped, nothing listens on ${adapter.address}`);
      continue;
    }
    results.push(result);
    try {
      for (let run = 1; run <= RUNS; run++) {
        const relaySeconds = await relayDrain(adapter, result);
        result.relaySeconds.push(relaySeconds);
        console.log(`${adapter.name} run ${run}/${RUNS}: relay ${fmt(rate(relaySeconds))} events/s`);
        const rawSeconds = await rawCeiling(adapter, result);
        result.rawSeconds.push(rawSeconds);
        console.log(`${adapter.name} run ${run}/${RUNS}: raw   ${fmt(rate(rawSeconds))} msg/s`);
      }
    } catch (error) {
      result.checks.push(`failed: ${error instanceof Error ? error.message : String(error)}`);
      console.error(`${adapter.name}: ${error instanceof Error ? (error.stack ?? error.message) : error}`);
    }
    if (result.relaySeconds.length > 0) result.relay = summarize(result.relaySeconds.map(rate));
    if (result.rawSeconds.length > 0) result.raw = summarize(result.rawSeconds.map(rate));
    if (result.relay && result.raw) result.ratio = result.relay.median / result.raw.median;
    for (const check of result.checks) console.log(`${adapter.name}: ${check}`);
  }

  const lines = [
    `# Relay drain vs raw broker ceiling — ${startedAt.toISOString()}`,
    '',
    `${fmt(workload.events)} events over ${fmt(workload.aggregates)} aggregates, ~${workload.payloadBytes}-byte JSON ` +
      `payloads with the CloudEvents envelope headers; relay batchSize 1,000, one relay in-process; ` +
      `median (min–max) of ${RUNS} runs, relay and raw interleaved.`,
    '',
    '| broker | relay drain events/s | raw ceiling msg/s | ratio |',
    '|---|---:|---:|---:|',
  ];
  for (const r of results) {
    if (r.skipped !== undefined) {
      lines.push(`| ${r.broker} | skipped: ${r.skipped} | | |`);
      continue;
    }
    const relay = r.relay ? range(r.relay) : 'n/a';
    const raw = r.raw ? range(r.raw) : 'n/a';
    const ratio = r.ratio === undefined ? 'n/a' : `${(r.ratio * 100).toFixed(0)} %`;
    lines.push(`| ${r.broker} | ${relay} | ${raw} | ${ratio} |`);
  }
  lines.push('');
  for (const r of results) {
    if (r.note !== undefined) lines.push(`- ${r.broker}: ${r.note}`);
    for (const check of r.checks) lines.push(`- ${r.broker}: ${check}`);
  }
  const markdown = `${lines.join('\n')}\n`;
  console.log(`\n${markdown}`);

  const stamp = startedAt.toISOString().replace(/[:.]/g, '-');
  const dir = new URL('./results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  writeFileSync(new URL(`brokers-${stamp}.md`, dir), markdown);
  writeFileSync(
    new URL(`brokers-${stamp}.json`, dir),
    `${JSON.stringify({ startedAt, workload, runs: RUNS, machine: await machine(pool), results }, null, 2)}\n`,
  );
  console.log(`wrote bench/results/brokers-${stamp}.{md,json}`);
}

try {
  await main();
} finally {
  await pool.end();
}
