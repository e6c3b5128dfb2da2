/**
 * The CDC failure scenarios that run in both producer modes (issue 14, test 8: test 1 again with
 * `via: 'wal'`): cdc-stream*.test.ts call these with their mode. Test 2 (kill -9 mid-stream) is
 * the relay contract's `kill` case (test/contract/cdc-*-relay.contract.test.ts).
 * Every relay runs in a child process on the built package (test/helpers/cdc-relay-process.ts).
 */
import { randomBytes } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import pg from 'pg';
import { expect } from 'vitest';
import { migrate } from '../../src/schema/migrate.js';
import {
  cdcEvents,
  cdcNames,
  countIds,
  dropCdcObjects,
  eventRows,
  firstDeliveryOrderViolations,
  missingIds,
  produce,
  type Via,
  waitUntil,
} from '../helpers/cdc.js';
import { type CdcChildConfig, CdcRelayProcess } from '../helpers/cdc-relay-process.js';
import { waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { KAFKA_BROKER } from '../helpers/kafka.js';
import { kafkaReader, readTopic } from '../helpers/kafka-read.js';
import { deleteStream, readStream } from '../helpers/nats-stream.js';

/** A test file's schema, its slot and publication, its relay children and clean-ups. */
export class CdcFixture {
  readonly children: CdcRelayProcess[] = [];
  readonly cleanups: Array<() => Promise<void>> = [];

  private constructor(
    readonly db: { readonly pool: pg.Pool; readonly schema: string },
    readonly databaseUrl: string,
    /** The schema's default slot and publication in that database. */
    private readonly names: { readonly slot: string; readonly publication: string },
  ) {}

  /** A fresh migrated schema `t_<name>_<hex>` on the shared server, or on `databaseUrl`'s. */
  static async create(name: string, databaseUrl = DATABASE_URL): Promise<CdcFixture> {
    const schema = `t_${name}_${randomBytes(4).toString('hex')}`;
    const pool = new pg.Pool({ connectionString: databaseUrl, max: 6 });
    // A private server restarted under the pool: an idle connection's error is no test failure.
    pool.on('error', () => undefined);
    await migrate(pool, { schema, partitions: 16 });
    return new CdcFixture({ pool, schema }, databaseUrl, await cdcNames(pool, schema));
  }

  get schema(): string {
    return this.db.schema;
  }

  get slot(): string {
    return this.names.slot;
  }

  /** A relay child on this schema (NATS on the shared server unless `config` says otherwise). */
  relay(config: Partial<CdcChildConfig> & Pick<CdcChildConfig, 'broker'>): CdcRelayProcess {
    const child = CdcRelayProcess.spawn({
      databaseUrl: this.databaseUrl,
      schema: this.db.schema,
      relayId: `cdc-${randomBytes(3).toString('hex')}`,
      leaseMs: 2000,
      heartbeatMs: 1000,
      silenceTimeoutMs: 5000,
      statusIntervalMs: 250,
      ...config,
    });
    this.children.push(child);
    return child;
  }

  /** Kills every child, runs the clean-ups, drops slot, publication and schema. */
  async close(): Promise<void> {
    for (const c of this.children.splice(0)) await c.kill();
    for (const f of this.cleanups.splice(0).reverse()) await f().catch(() => undefined);
    const { slot, publication } = this.names;
    await dropCdcObjects(this.db.pool, slot, publication);
    await this.db.pool.query(`DROP SCHEMA IF EXISTS "${this.db.schema}" CASCADE`);
    await this.db.pool.end();
  }
}

/** A fresh NATS stream and subject prefix on the shared server, deleted at the fixture's end. */
export function natsNames(fixture: CdcFixture): {
  stream: string;
  prefix: string;
  nats: CdcChildConfig['nats'];
} {
  const tag = randomBytes(4).toString('hex');
  const stream = `TXO_CDCF_${tag}`;
  const prefix = `cdcf${tag}`;
  fixture.cleanups.push(() => deleteStream(NATS_URL, stream));
  return { stream, prefix, nats: { servers: NATS_URL, stream, subjects: [`${prefix}.>`] } };
}

/** Messages a JetStream stream holds now (0 while it does not exist). */
export async function streamCount(stream: string, servers = NATS_URL): Promise<number> {
  const nc = await connect({ servers });
  try {
    const jsm = await jetstreamManager(nc);
    return (await jsm.streams.info(stream)).state.messages;
  } catch {
    return 0;
  } finally {
    await nc.close();
  }
}

/**
 * The stream test's size: 20,000 events over 1,000 aggregates in CI (many batches, many slot
 * confirmations, each aggregate 20 deep); TXO_CDC_STREAM_EVENTS=100000 runs it at the size issue
 * 14 first measured (5,000 aggregates), as the benchmark's W1 CDC rows stream 50,000 and more.
 */
const TOTAL = Number(process.env['TXO_CDC_STREAM_EVENTS'] ?? 20_000);
const AGGREGATES = Math.max(1, Math.round(TOTAL / 20));

/**
 * Test 1: TOTAL events over AGGREGATES aggregates, committed while the relay streams: every event
 * delivered, first deliveries in per-aggregate order, nothing left in the table.
 */
export async function streamsEverything(
  fixture: CdcFixture,
  via: Via,
  broker: 'nats' | 'kafka',
): Promise<void> {
  const tag = randomBytes(4).toString('hex');
  let prefix: string;
  let relay: CdcRelayProcess;
  if (broker === 'nats') {
    const n = natsNames(fixture);
    prefix = n.prefix;
    relay = fixture.relay({ broker, nats: n.nats, relayId: `stream-${via}-nats` });
  } else {
    prefix = `cdcf${tag}`;
    const { admin, reader } = kafkaReader(`txo-cdcf-${tag}`);
    fixture.cleanups.push(async () => {
      await admin.deleteTopics({ topics: [`${prefix}.order`] }).catch(() => undefined);
      await admin.close();
      await reader.close();
    });
    await admin.createTopics({ topics: [`${prefix}.order`], partitions: 4, replicas: 1 });
    relay = fixture.relay({ broker, kafka: { brokers: [KAFKA_BROKER] }, relayId: `stream-${via}-kafka` });
  }
  await relay.streaming(40_000);

  const started = Date.now();
  const committed = await produce(fixture.db.pool, fixture.schema, cdcEvents(prefix, TOTAL, AGGREGATES), {
    via,
    perTx: 1000,
  });
  const producedMs = Date.now() - started;

  let deliveries: Array<{ eventId: string; aggregateId: string; sequence: number }>;
  if (broker === 'nats') {
    const stream = relay.config.nats!.stream;
    await waitUntil(async () => (await streamCount(stream)) >= TOTAL, {
      timeoutMs: 70_000,
      intervalMs: 500,
      what: () =>
        `${TOTAL} events in the stream (relay: ${JSON.stringify(relay.stats())}, exited ${JSON.stringify(relay.exited)})\n${relay.problems()}`,
    });
    deliveries = await readStream(NATS_URL, stream);
  } else {
    const { reader } = kafkaReader(`txo-cdcf-read-${tag}`);
    try {
      deliveries = await readTopic(reader, `${prefix}.order`, TOTAL, 70_000);
    } finally {
      await reader.close();
    }
  }
  const drainedMs = Date.now() - started;
  const s = relay.stats()!;
  console.info(
    `cdc stream ${via}/${broker}: ${TOTAL} events committed in ${producedMs} ms, all delivered ${drainedMs} ms after the first commit; ${deliveries.length} deliveries; stats ${JSON.stringify({ published: s.published, batches: s.batches, cdc: s.cdc })}`,
  );

  expect(relay.exited, relay.problems()).toBeUndefined();
  expect(
    missingIds(
      committed,
      deliveries.map((d) => d.eventId),
    ),
  ).toEqual([]);
  expect(countIds(committed)).toBe(TOTAL);
  // Kafka records are keyed by aggregate: one aggregate's records sit in one partition, in order.
  expect(firstDeliveryOrderViolations(deliveries)).toEqual([]);
  if (via === 'table')
    await waitFor(async () => (await eventRows(fixture.db.pool, fixture.schema)) === 0, {
      timeoutMs: 20_000,
      what: 'the events table emptied by the outcome statements',
    });
  else expect(await eventRows(fixture.db.pool, fixture.schema)).toBe(0);
  expect(s.dead).toBe(0);
  // Streamed, not handed over to the relay's polling path.
  expect(s.cdc.handovers).toBe(0);
  expect(s.cdc.reconnects).toBe(0);
  await relay.stop();
  expect(relay.exited?.code, relay.problems()).toBe(0);
}
