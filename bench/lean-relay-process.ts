/**
 * The lean reference relay in a process of its own (so its CPU is read by process exactly as the
 * tx-outbox relay's is: this process, its PostgreSQL backend by application_name, nats-server).
 * No per-aggregate order, no leases, no fencing: what an unordered outbox relay needs at least.
 * Its loop, on one connection with the relay's session settings (relaySessionSettings):
 *
 *   BEGIN;
 *   SELECT … FROM <schema>.events WHERE status = 'pending' AND next_attempt_at <= now()
 *     ORDER BY id LIMIT <batchSize> FOR UPDATE SKIP LOCKED;
 *   -- publish every row through the lean PubAck pipeline (systems/lean-publish.ts), await all
 *   DELETE FROM <schema>.events WHERE id = ANY($1);
 *   COMMIT;
 *
 * until a claim comes back empty; then it idles by sleeping `idleMs` (1 ms) between empty claims
 * (a plain polling loop: no LISTEN/NOTIFY, which would cost the producers a commit-time lock).
 * A refused publish or a missing PubAck rolls the batch back and ends the process (a bench, not
 * a relay: nothing is retried).
 *
 * Run by bench/systems/lean-relay.ts with `node --import tsx`. Config in TXO_BENCH_LEAN (JSON):
 * { databaseUrl, schema, natsUrl, stream, applicationName, batchSize, settings, idleMs }. Prints
 * {"started":true} once connected; on SIGTERM finishes its batch and prints { stats, peakRssMb }.
 */
import { readFileSync } from 'node:fs';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { type LeanEvent, LeanJetStream } from './systems/lean-publish.js';

interface Config {
  readonly databaseUrl: string;
  readonly schema: string;
  readonly natsUrl: string;
  readonly stream: string;
  readonly applicationName: string;
  readonly batchSize: number;
  readonly settings: string;
  readonly idleMs: number;
}

interface Row {
  id: string;
  event_id: string;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  sequence_base: string;
  event_type: string;
  schema_version: number;
  topic: string | null;
  payload: string | null;
  payload_bytes: Buffer | null;
  headers: string;
  created_at: Date;
}

const cfg = JSON.parse(process.env['TXO_BENCH_LEAN'] ?? '{}') as Config;
const schema = `"${cfg.schema.replaceAll('"', '""')}"`;
const CLAIM = {
  name: 'lean_claim',
  text: `SELECT id::text AS id, event_id::text AS event_id, aggregate_type, aggregate_id,
       sequence::text AS sequence, sequence_base::text AS sequence_base, event_type, schema_version,
       topic, payload::text AS payload, payload_bytes, headers::text AS headers, created_at
  FROM ${schema}.events e
  WHERE status = 'pending' AND next_attempt_at <= now()
  ORDER BY e.id -- the column (the output id is its text)
  LIMIT $1
  FOR UPDATE SKIP LOCKED`,
};
const DELETE = { name: 'lean_delete', text: `DELETE FROM ${schema}.events WHERE id = ANY ($1::bigint[])` };

function toEvent(row: Row): LeanEvent {
  const bytes = row.payload_bytes;
  return {
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: row.sequence,
    sequenceBase: Number(row.sequence_base ?? 0),
    type: row.event_type,
    schemaVersion: row.schema_version,
    subject: row.topic !== null && row.topic !== '' ? row.topic : `${row.aggregate_type}.${row.event_type}`,
    payload: bytes ?? Buffer.from(row.payload ?? 'null'),
    contentType: bytes ? 'application/octet-stream' : 'application/json',
    createdAt: row.created_at,
    headers: JSON.parse(row.headers) as Record<string, string>,
  };
}

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
const publisher = await LeanJetStream.open(nc, cfg.stream);

let stopping = false;

/** One batch; false when the claim came back empty. */
async function cycle(): Promise<boolean> {
  const t0 = performance.now();
  await client.query('BEGIN');
  let open = true;
  try {
    const { rows } = await client.query<Row>({ ...CLAIM, values: [cfg.batchSize] });
    if (rows.length === 0) {
      await client.query('COMMIT');
      open = false;
      stats.emptyClaims += 1;
      return false;
    }
    const t1 = performance.now();
    watches.claim.add(t1 - t0);
    const refused = await publisher.publish(rows.map(toEvent));
    if (refused > 0) throw new Error(`JetStream refused ${refused} of ${rows.length} publishes`);
    const t2 = performance.now();
    watches.publish.add(t2 - t1);
    await client.query({ ...DELETE, values: [rows.map((r) => r.id)] });
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
