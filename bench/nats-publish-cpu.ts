/**
 * The NATS publisher alone against a real NATS server: client CPU per 1,000 messages of
 * `natsPublisher` (pipeline mode) next to the lean PubAck pipeline of the benchmarks
 * (systems/lean-publish.ts) sending the same CloudEvents headers, and the lean pipeline with a
 * `Nats-Msg-Id` header only: what the wire format costs apart from the publisher's own work.
 * Interleaved batch by batch, in one process; also counts the socket writes to NATS and their
 * bytes per 1,000 messages, and reads nats-server's CPU (10 ms ticks, summed over every batch; the
 * server is shared, so it counts what others send meanwhile too).
 *
 *   npx tsx bench/nats-publish-cpu.ts                 # 200 batches of 1,000, 3 rounds
 *   BATCHES=100 BATCH=1000 ROUNDS=5 npx tsx bench/nats-publish-cpu.ts
 *   ONLY=natsPublisher node --cpu-prof --import tsx bench/nats-publish-cpu.ts   # one of them (name prefix)
 */
import { randomUUID } from 'node:crypto';
import { Socket } from 'node:net';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { OutboxMessage } from '../src/index.js';
import { natsPublisher } from '../src/publishers/nats/index.js';
import { findNatsPid, processCpuUs } from './cpu.js';
import { NATS_URL, summarize } from './lib.js';
import { type LeanEvent, LeanJetStream } from './systems/lean-publish.js';
import { benchEvent } from './systems/workload.js';

const BATCHES = Number(process.env['BATCHES'] ?? 200);
const BATCH = Number(process.env['BATCH'] ?? 1000);
const ROUNDS = Number(process.env['ROUNDS'] ?? 3);
const tag = randomUUID().slice(0, 8);
const stream = `TXO_PUBCPU_${tag}`;
const prefix = `pubcpu${tag}`;

/** Socket writes (calls and bytes) to the NATS port, counted while `counting`. */
const writes = { calls: 0, bytes: 0 };
let counting = false;
const natsPort = Number(new URL(NATS_URL.replace('nats://', 'http://')).port || 4222);
const write = Socket.prototype.write;
Socket.prototype.write = function (this: Socket, chunk: unknown, ...rest: unknown[]) {
  if (counting && this.remotePort === natsPort) {
    writes.calls += 1;
    writes.bytes += (chunk as Uint8Array).length ?? 0;
  }
  return (write as (...a: unknown[]) => boolean).call(this, chunk, ...rest);
} as typeof write;

/** A batch as the relay hands it over (toMessage's shape: a row's payload text as a Buffer). */
function messages(batch: number): OutboxMessage[] {
  const createdAt = new Date();
  return Array.from({ length: BATCH }, (_, k) => {
    const i = batch * BATCH + k;
    const e = benchEvent(i, 5000, 300);
    return {
      id: String(i + 1),
      eventId: randomUUID(),
      aggregateType: e.aggregateType,
      aggregateId: e.aggregateId,
      sequence: Math.floor(i / 5000) + 1,
      type: e.type,
      schemaVersion: 1,
      topic: `${prefix}.${e.subjectSuffix}`,
      payload: Buffer.from(JSON.stringify(e.payload)),
      contentType: 'application/json',
      headers: {},
      createdAt,
      attempts: 0,
    };
  });
}

const leanEvent = (m: OutboxMessage): LeanEvent => ({
  eventId: m.eventId,
  aggregateType: m.aggregateType,
  aggregateId: m.aggregateId,
  sequence: String(m.sequence),
  sequenceBase: 0,
  type: m.type,
  schemaVersion: m.schemaVersion,
  subject: m.topic!,
  payload: m.payload,
  contentType: m.contentType,
  createdAt: m.createdAt,
  headers: m.headers,
});

interface Contender {
  readonly name: string;
  /** Publishes one batch (messages built outside the timing). */
  run(batch: readonly OutboxMessage[]): Promise<void>;
}

const setup = await connect({ servers: NATS_URL });
const jsm = await jetstreamManager(setup);
await jsm.streams.add({ name: stream, subjects: [`${prefix}.>`], duplicate_window: 10_000_000_000 });

// PENDING: the client's flush threshold (bytes buffered before a socket write; 32 KiB by default).
// (a connection option nats.js reads but does not declare).
const pending = (process.env['PENDING'] ? { pendingLimit: Number(process.env['PENDING']) } : {}) as object;
const publisher = natsPublisher({ url: NATS_URL, stream, clientOptions: pending });
const ncLean: NatsConnection = await connect({ servers: NATS_URL, name: 'lean', ...pending });
const lean = await LeanJetStream.open(ncLean, stream);
const ncBare: NatsConnection = await connect({ servers: NATS_URL, name: 'bare' });
const bare = await LeanJetStream.open(ncBare, stream);
const signal = new AbortController().signal;

const only = process.env['ONLY']?.split(',');
const all: Contender[] = [
  {
    name: 'natsPublisher (pipeline)',
    async run(batch) {
      const outcomes = await publisher.publish(batch, signal);
      if (outcomes.some((o) => !o.ok)) throw new Error('natsPublisher: a publish failed');
    },
  },
  {
    name: 'lean, same headers',
    async run(batch) {
      if ((await lean.publish(batch.map(leanEvent))) > 0) throw new Error('lean: refused');
    },
  },
  {
    name: 'lean, Nats-Msg-Id only',
    async run(batch) {
      if ((await bare.publish(batch.map(leanEvent), 30_000, msgIdOnly)) > 0) throw new Error('bare: refused');
    },
  },
];

function msgIdOnly(e: LeanEvent): Uint8Array {
  return Buffer.from(`NATS/1.0\r\nNats-Msg-Id: ${e.eventId}\r\n\r\n`);
}

const contenders = only ? all.filter((c) => only.some((o) => c.name.startsWith(o))) : all;

// Warm up every path (JIT, connection, stream).
for (const c of contenders) for (let b = 0; b < 5; b++) await c.run(messages(b));

const natsPid = findNatsPid();
const natsCpuMs = (): number => (natsPid === undefined ? 0 : (processCpuUs(natsPid) ?? 0) / 1000);
const figures = new Map<string, { cpu: number[]; nats: number[]; writes: number[]; bytes: number[] }>();
for (let round = 0; round < ROUNDS; round++) {
  const totals = new Map<string, { cpu: number; nats: number; writes: number; bytes: number }>();
  for (let b = 0; b < BATCHES; b++) {
    const batch = messages(b);
    // Rotated, so the one after the batch is built (its garbage collected) is not always the same.
    for (let k = 0; k < contenders.length; k++) {
      const c = contenders[(b + k) % contenders.length]!;
      // Same messages for each (the ids repeat: JetStream answers duplicates, which costs it the same).
      writes.calls = 0;
      writes.bytes = 0;
      counting = true;
      const natsBefore = natsCpuMs();
      const before = process.cpuUsage();
      await c.run(batch);
      const used = process.cpuUsage(before);
      const natsUsed = natsCpuMs() - natsBefore;
      counting = false;
      const t = totals.get(c.name) ?? { cpu: 0, nats: 0, writes: 0, bytes: 0 };
      t.cpu += (used.user + used.system) / 1000;
      t.nats += natsUsed;
      t.writes += writes.calls;
      t.bytes += writes.bytes;
      totals.set(c.name, t);
    }
  }
  for (const [name, t] of totals) {
    const per = (BATCHES * BATCH) / 1000;
    const f = figures.get(name) ?? { cpu: [], nats: [], writes: [], bytes: [] };
    f.cpu.push(t.cpu / per);
    f.nats.push(t.nats / per);
    f.writes.push(t.writes / per);
    f.bytes.push(t.bytes / per);
    figures.set(name, f);
  }
}

console.log(`${BATCHES} batches of ${BATCH}, ${ROUNDS} rounds, interleaved; per 1,000 messages (median):`);
const base = summarize(figures.get('lean, same headers')?.cpu ?? [1]).median;
for (const [name, f] of figures) {
  const cpu = summarize(f.cpu).median;
  console.log(
    `${name.padEnd(28)} CPU ${cpu.toFixed(1)} ms (${(cpu / base).toFixed(2)}× lean same headers) ` +
      `[${f.cpu.map((v) => v.toFixed(1)).join(', ')}]; nats-server ${summarize(f.nats).median.toFixed(1)} ms; socket writes ${summarize(f.writes).median.toFixed(1)}, ` +
      `${Math.round(summarize(f.bytes).median / 1024)} KiB`,
  );
}

await publisher.close();
await ncLean.close();
await ncBare.close();
await jsm.streams.delete(stream);
await setup.close();
