/**
 * The lean reference relay in a process of its own (so its CPU is read by process exactly as the
 * tx-outbox relay's is: this process, its PostgreSQL backend by application_name, nats-server).
 * No per-aggregate order, no leases, no fencing: what an unordered outbox relay needs at least.
 * Its loop, on one connection with the relay's session settings (relaySessionSettings):
 *
 *   BEGIN;
 *   SELECT id, event_id, <subject>, payload … FROM <schema>.events
 *     WHERE status = 'pending' AND next_attempt_at <= now()
 *     ORDER BY id LIMIT <batchSize> FOR UPDATE SKIP LOCKED;
 *   -- the batch written to NATS in 64 KB writes, every PubAck awaited (systems/lean-publish.ts)
 *   DELETE FROM <schema>.events WHERE id = ANY($1);
 *   COMMIT;
 *
 * until a claim comes back empty; then it idles by sleeping `idleMs` (1 ms) between empty claims
 * (a plain polling loop: no LISTEN/NOTIFY, which would cost the producers a commit-time lock).
 * A refused publish or a missing PubAck rolls the batch back and ends the process (a bench, not
 * a relay: nothing is retried).
 *
 * `headers`: 'msg-id' (the lean relay) sends one header, `Nats-Msg-Id`, and reads only the
 * columns it sends; 'same' (the lean relay with tx-outbox's headers) reads the columns the
 * envelope needs and sends, per message, the header block tx-outbox's NATS publisher sends, made
 * by the library's own code on its hot path (toMessage, HeaderBlocks for the default source and
 * the stream: the CloudEvents binding, Nats-Msg-Id, Nats-Expected-Stream; the default subject),
 * so the bytes, and the work of making them, are the publisher's.
 *
 * Run by bench/systems/lean-relay.ts compiled to plain JavaScript (no TypeScript loader in the
 * measured process). Config in TXO_BENCH_LEAN (JSON): { databaseUrl, schema, natsUrl, stream,
 * applicationName, batchSize, settings, idleMs, headers }. Prints {"started":true} once connected;
 * on SIGTERM finishes its batch and prints { stats, peakRssMb }.
 */
import { readFileSync } from 'node:fs';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { type EventRow, toMessage } from '../src/core/event-row.js';
import { DEFAULT_CE_SOURCE } from '../src/envelope/ce-source.js';
import { defaultSubject, HeaderBlocks } from '../src/publishers/nats/wire.js';
import { LeanBatchPublisher, type LeanHeaders, msgIdHeader } from './systems/lean-publish.js';

interface Config {
  readonly databaseUrl: string;
  readonly schema: string;
  readonly natsUrl: string;
  readonly stream: string;
  readonly applicationName: string;
  readonly batchSize: number;
  readonly settings: string;
  readonly idleMs: number;
  readonly headers: LeanHeaders;
}

const cfg = JSON.parse(process.env['TXO_BENCH_LEAN'] ?? '{}') as Config;
const same = cfg.headers === 'same';
const schema = `"${cfg.schema.replaceAll('"', '""')}"`;
const WHERE = `FROM ${schema}.events e
  WHERE status = 'pending' AND next_attempt_at <= now()
  ORDER BY e.id
  LIMIT $1
  FOR UPDATE SKIP LOCKED`;
/** The lean claim: [id, event_id, subject, payload (JSON text), payload_bytes] per row. */
const LEAN_CLAIM = {
  name: 'lean_claim',
  text: `SELECT id, event_id, coalesce(nullif(topic, ''), aggregate_type || '.' || event_type),
       payload::text, payload_bytes
  ${WHERE}`,
};
/** The same-headers claim: the columns of tx-outbox's claim that make the message (EventRow). */
const SAME_CLAIM = {
  name: 'lean_claim',
  text: `SELECT id::text AS id, event_id::text AS event_id, aggregate_type, aggregate_id,
       sequence::text AS sequence, sequence_base::text AS sequence_base, event_type, schema_version,
       topic, payload::text AS payload, payload_bytes, headers::text AS headers, created_at,
       deliver_after, attempts
  ${WHERE}`,
};
const DELETE = { name: 'lean_delete', text: `DELETE FROM ${schema}.events WHERE id = ANY ($1::bigint[])` };

type LeanRow = [id: string, eventId: string, subject: string, payload: string | null, bytes: Buffer | null];

/** Mean and max of the times added, ms. */
class Watch {
  total = 0;
  count = 0;
  max = 0;

  add(ms: number): void {
    this.total += ms;
    this.count += 1;
    if (ms > this.max) this.max = ms;
  }

  get(): { mean: number; max: number } {
    return { mean: this.count === 0 ? 0 : this.total / this.count, max: this.max };
  }
}

const stats = { published: 0, batches: 0, emptyClaims: 0 };
const watches = { claim: new Watch(), publish: new Watch(), record: new Watch() };

const client = new pg.Client({ connectionString: cfg.databaseUrl, application_name: cfg.applicationName });
await client.connect();
await client.query(cfg.settings);
const nc = await connect({ servers: cfg.natsUrl, name: 'lean-relay' });
const publisher = await LeanBatchPublisher.open(
  nc,
  process.env['TXO_LEAN_FLUSH_BYTES'] ? Number(process.env['TXO_LEAN_FLUSH_BYTES']) : undefined,
);

/** Adds the claimed rows to the publisher's batch; the DELETE's parameter (`{id,id,…}`). */
function addLean(rows: readonly LeanRow[]): string {
  let ids = '{';
  for (let i = 0; i < rows.length; i += 1) {
    const [id, eventId, subject, payload, bytes] = rows[i]!;
    publisher.add(subject, msgIdHeader(eventId), bytes ?? payload ?? 'null');
    ids += i === 0 ? id : `,${id}`;
  }
  return `${ids}}`;
}

/** tx-outbox's header blocks, as natsPublisher (pipeline mode) makes them for the default source and the stream. */
const blocks = new HeaderBlocks(DEFAULT_CE_SOURCE, cfg.stream);

function addSame(rows: readonly EventRow[]): string {
  let ids = '{';
  for (let i = 0; i < rows.length; i += 1) {
    const message = toMessage(rows[i]!);
    publisher.add(defaultSubject(message), blocks.encode(message), message.payload);
    ids += i === 0 ? message.id : `,${message.id}`;
  }
  return `${ids}}`;
}

let stopping = false;

/** One batch; false when the claim came back empty. */
async function cycle(): Promise<boolean> {
  const t0 = performance.now();
  await client.query('BEGIN');
  let open = true;
  try {
    const { rows } = same
      ? await client.query<EventRow>({ ...SAME_CLAIM, values: [cfg.batchSize] })
      : await client.query<LeanRow>({ ...LEAN_CLAIM, rowMode: 'array', values: [cfg.batchSize] });
    if (rows.length === 0) {
      await client.query('COMMIT');
      open = false;
      stats.emptyClaims += 1;
      return false;
    }
    const t1 = performance.now();
    watches.claim.add(t1 - t0);
    const ids = same ? addSame(rows as EventRow[]) : addLean(rows as LeanRow[]);
    const refused = await publisher.send();
    if (refused > 0) throw new Error(`JetStream refused ${refused} of ${rows.length} publishes`);
    const t2 = performance.now();
    watches.publish.add(t2 - t1);
    await client.query({ ...DELETE, values: [ids] });
    await client.query('COMMIT');
    open = false;
    watches.record.add(performance.now() - t2);
    stats.published += rows.length;
    stats.batches += 1;
    return true;
  } finally {
    if (open) await client.query('ROLLBACK').catch(() => undefined);
  }
}

function peakRssMb(): number {
  const status = readFileSync('/proc/self/status', 'utf8');
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return Math.round(kb / 1024);
}

const loop = (async () => {
  while (!stopping) {
    if (!(await cycle())) await new Promise((r) => setTimeout(r, cfg.idleMs));
  }
})();
loop.catch((error: unknown) => {
  console.error('lean relay:', error);
  process.exit(1);
});

process.stdout.write(`${JSON.stringify({ started: true })}\n`);
process.on('SIGTERM', async () => {
  stopping = true;
  await loop.catch(() => undefined);
  await nc.close();
  await client.end();
  const timings = {
    claim: watches.claim.get(),
    publish: watches.publish.get(),
    record: watches.record.get(),
  };
  process.stdout.write(`${JSON.stringify({ stats: { ...stats, timings }, peakRssMb: peakRssMb() })}\n`);
  process.exit(0);
});
