/**
 * One behaviour suite for every publisher, on the real broker, switched by the
 * features a publisher declares. Test-runner agnostic: pass your runner's
 * `describe`, `it`, `expect`, `beforeAll`, `afterAll` (vitest and jest fit).
 *
 *   publisherContract({ describe, it, expect, beforeAll, afterAll }, {
 *     name: 'redis', features: { orderedPerKey: true, brokerDedup: true, persistent: true },
 *     broker: { host: '127.0.0.1', port: 6379 }, create, topic, read, poison,
 *   });
 *
 * The suite puts a TcpProxy in front of the broker so it can cut the
 * connection ("broker down") and restore it, without touching the broker.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { paddedSequence } from '../envelope/attributes.js';
import { OutboxError } from '../errors.js';
import { fromEnvelope } from '../inbox/message.js';
import { enqueue } from '../producer/enqueue.js';
import { inTransaction } from '../producer/transaction.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../publishers/contract.js';
import { createRelay } from '../relay/polling/relay.js';
import { migrate } from '../schema/migrate.js';
import { AWKWARD_IDS } from './envelopes.js';
import { type Address, TcpProxy } from './tcp-proxy.js';

export interface PublisherFeatures {
  /** Messages of one key (aggregate) are stored in publish order. */
  readonly orderedPerKey: boolean;
  /** The broker drops a republished event id (JetStream Nats-Msg-Id, Redis guard …). */
  readonly brokerDedup: boolean;
  /** Messages survive a broker restart. */
  readonly persistent: boolean;
}

/** What the broker holds, read back for the checks. */
export interface ReceivedMessage {
  readonly eventId: string;
  readonly aggregateId: string;
  readonly sequence: number;
  /**
   * Every header (property, user property, field) as a string, named as on the wire, with the
   * transport's content type under `content-type` where it has one (HTTP, Kafka, AMQP, MQTT 5):
   * what `fromEnvelope` reads.
   */
  readonly headers: Readonly<Record<string, string>>;
  readonly payload: Uint8Array;
  /**
   * The message as the official CloudEvents SDK reads it (its HTTP, Kafka or MQTT parser; for
   * NATS and AMQP a strict `new CloudEvent` after the binding's decoding), as plain attributes.
   * Required when the subject declares `cloudEvents`.
   */
  readonly cloudEvent?: Readonly<Record<string, unknown>>;
}

export interface PublisherUnderTest {
  readonly name: string;
  readonly features: PublisherFeatures;
  /** The real broker; the suite connects through a proxy in front of it. */
  readonly broker: Address;
  /**
   * A publisher connected to `address`, for destinations of this `namespace` (unique per test),
   * stamping the CloudEvents source `ceSource` when given.
   */
  create(
    address: Address,
    namespace: string,
    options?: {
      readonly ceSource?: string;
      /** @deprecated The same value as `ceSource`, for a `create` written before the rename. */
      readonly source?: string;
    },
  ): Publisher | Promise<Publisher>;
  /** The `topic` an event must carry to land in this namespace's destination. */
  topic(namespace: string): string;
  /** Everything the broker holds for the namespace, in broker order; waits until `expected` arrived (or a timeout). */
  read(namespace: string, expected: number): Promise<ReceivedMessage[]>;
  /** A copy of `message` the broker refuses permanently (too large, unroutable, bad topic …). */
  poison(namespace: string, message: OutboxMessage): OutboxMessage | Promise<OutboxMessage>;
  /** Removes what the namespace created on the broker. */
  cleanup?(namespace: string): Promise<void>;
  /** How long a reconnect may take before the suite gives up, ms. Default 20000. */
  readonly reconnectMs?: number;
  /** `read` fills each message's `cloudEvent`: the suite checks every attribute the SDK reads. */
  readonly cloudEvents?: boolean;
}

/** The part of a test runner the suite uses. */
export interface TestApi {
  describe(name: string, fn: () => void): void;
  it(name: string, fn: () => Promise<void>, timeout?: number): void;
  beforeAll(fn: () => Promise<void>, timeout?: number): void;
  afterAll(fn: () => Promise<void>, timeout?: number): void;
  // biome-ignore lint/suspicious/noExplicitAny: the runner's own expect, whatever its typing
  expect: (actual: unknown) => any;
}

const never = new AbortController().signal;

/** An OutboxMessage as the relay hands it over. */
export function contractMessage(
  topic: string,
  aggregateId: string,
  sequence: number,
  extra: Partial<OutboxMessage> = {},
): OutboxMessage {
  return {
    id: String(sequence),
    eventId: randomUUID(),
    aggregateType: 'contract',
    aggregateId,
    sequence,
    type: 'contract.happened',
    schemaVersion: 2,
    topic,
    payload: Buffer.from(JSON.stringify({ aggregateId, sequence, pad: 'p'.repeat(64) })),
    contentType: 'application/json',
    headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    createdAt: new Date(),
    attempts: 0,
    ...extra,
  };
}

function failures(outcomes: readonly PublishOutcome[]): Array<Extract<PublishOutcome, { ok: false }>> {
  return outcomes.filter((o): o is Extract<PublishOutcome, { ok: false }> => !o.ok);
}

export interface ContractOptions {
  /** Also move events through the full relay from this PostgreSQL database (a scratch schema is created and dropped). */
  readonly relay?: { readonly databaseUrl: string; readonly events?: number; readonly aggregates?: number };
}

export function publisherContract(
  api: TestApi,
  subject: PublisherUnderTest,
  options: ContractOptions = {},
): void {
  const { describe, it, expect, beforeAll, afterAll } = api;
  const reconnectMs = subject.reconnectMs ?? 20_000;

  describe(`publisher contract: ${subject.name}`, () => {
    let proxy: TcpProxy;
    const open: Publisher[] = [];
    const namespaces: string[] = [];
    const ns = (): string => {
      const n = `c${randomBytes(4).toString('hex')}`;
      namespaces.push(n);
      return n;
    };
    const publisher = async (namespace: string, ceSource?: string): Promise<Publisher> => {
      const p = await subject.create(
        proxy.address,
        namespace,
        ceSource === undefined ? undefined : { ceSource, source: ceSource },
      );
      open.push(p);
      return p;
    };

    /** `fromEnvelope` of what arrived: the event as it was sent. */
    const readBack = (received: ReceivedMessage, sent: OutboxMessage) => {
      const read = fromEnvelope(received.headers, received.payload);
      expect(read).toMatchObject({
        eventId: sent.eventId,
        type: sent.type,
        aggregateType: sent.aggregateType,
        aggregateId: sent.aggregateId,
        sequence: sent.sequence,
        schemaVersion: sent.schemaVersion,
        contentType: sent.contentType,
      });
      return read;
    };

    beforeAll(async () => {
      proxy = await TcpProxy.start(subject.broker);
    });
    afterAll(async () => {
      await Promise.all(open.map((p) => p.close().catch(() => undefined)));
      await proxy?.close();
      for (const n of namespaces) await subject.cleanup?.(n).catch(() => undefined);
    }, 60_000);

    it('publishes a batch; every message arrives with its envelope and payload intact', async () => {
      const n = ns();
      const p = await publisher(n);
      const batch = Array.from({ length: 20 }, (_, i) => contractMessage(subject.topic(n), `k${i}`, 1));
      const outcomes = await p.publish(batch, never);
      expect(failures(outcomes)).toEqual([]);
      const got = await subject.read(n, batch.length);
      expect(got).toHaveLength(batch.length);
      for (const sent of batch) {
        const r = got.find((m) => m.eventId === sent.eventId);
        expect(r).toBeDefined();
        readBack(r!, sent);
        expect(r!.headers['traceparent']).toBe(sent.headers['traceparent']);
        expect(Buffer.from(r!.payload).equals(Buffer.from(sent.payload))).toBe(true);
      }
    });

    it('awkward values arrive exactly as enqueued: every attribute, read by fromEnvelope and by the CloudEvents SDK', async () => {
      const n = ns();
      const source = 'urn:tx-outbox:contract/a%20b?x=1';
      const p = await publisher(n, source);
      const sequences = [1, 9, 10, 4_294_967_296, Number.MAX_SAFE_INTEGER];
      const batch = AWKWARD_IDS.map((aggregateId, i) =>
        contractMessage(subject.topic(n), aggregateId, sequences[i % sequences.length]!, {
          aggregateType: 'contract_x-1',
          type: `contract.happened/"v2"%41~${i}`,
          headers: {
            traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
            'x-note': 'a "quoted" %41; value',
          },
          createdAt: new Date(Date.UTC(2026, 11, 1, 10, 11, 12, i)),
        }),
      );
      expect(failures(await p.publish(batch, never))).toEqual([]);
      const got = await subject.read(n, batch.length);
      for (const sent of batch) {
        const r = got.find((m) => m.eventId === sent.eventId);
        expect(r).toBeDefined();
        expect(r!.aggregateId).toBe(sent.aggregateId);
        const read = readBack(r!, sent);
        expect(read.headers['ce-source']).toBe(source);
        expect(read.headers['ce-subject']).toBe(sent.aggregateId);
        expect(read.headers['x-note']).toBe('a "quoted" %41; value');
        if (subject.cloudEvents) {
          expect(r!.cloudEvent).toBeDefined(); // read() must fill it
          expect(r!.cloudEvent).toMatchObject({
            specversion: '1.0',
            id: sent.eventId,
            source,
            type: sent.type,
            time: sent.createdAt.toISOString(),
            subject: sent.aggregateId,
            datacontenttype: sent.contentType,
            aggregatetype: sent.aggregateType,
            aggregateid: sent.aggregateId,
            sequence: paddedSequence(sent.sequence),
            aggregatesequence: String(sent.sequence),
            schemaversion: String(sent.schemaVersion),
          });
        }
      }
    });

    if (subject.features.orderedPerKey) {
      it('keeps per-key order across batches', async () => {
        const n = ns();
        const p = await publisher(n);
        const keys = ['a', 'b', 'c', 'd'];
        for (let seq = 1; seq <= 10; seq++) {
          const outcomes = await p.publish(
            keys.map((k) => contractMessage(subject.topic(n), k, seq)),
            never,
          );
          expect(failures(outcomes)).toEqual([]);
        }
        const got = await subject.read(n, 40);
        for (const k of keys) {
          expect(got.filter((m) => m.aggregateId === k).map((m) => m.sequence)).toEqual(
            Array.from({ length: 10 }, (_, i) => i + 1),
          );
        }
      });
    }

    it('one bad message in a batch fails only itself, as permanent', async () => {
      const n = ns();
      const p = await publisher(n);
      const batch = Array.from({ length: 6 }, (_, i) => contractMessage(subject.topic(n), `p${i}`, 1));
      batch[2] = await subject.poison(n, batch[2]!);
      const outcomes = await p.publish(batch, never);
      expect(outcomes).toHaveLength(6);
      outcomes.forEach((o, i) => {
        if (i === 2) expect(o).toMatchObject({ ok: false, retryable: false });
        else expect(o).toEqual({ ok: true });
      });
      const got = await subject.read(n, 5);
      expect(got.map((m) => m.eventId).sort()).toEqual(
        batch
          .filter((_, i) => i !== 2)
          .map((m) => m.eventId)
          .sort(),
      );
    });

    it('broker down: retryable failures, no crash; broker back: publishing resumes without a restart', async () => {
      const n = ns();
      const p = await publisher(n);
      expect(failures(await p.publish([contractMessage(subject.topic(n), 'up', 1)], never))).toEqual([]);
      await proxy.cut();
      try {
        const down = await p.publish(
          [contractMessage(subject.topic(n), 'down', 1)],
          AbortSignal.timeout(15_000),
        );
        expect(down).toHaveLength(1);
        expect(down[0]).toMatchObject({ ok: false, retryable: true });
      } finally {
        await proxy.restore();
      }
      const deadline = Date.now() + reconnectMs;
      let last: PublishOutcome | undefined;
      const again = contractMessage(subject.topic(n), 'down', 1);
      while (Date.now() < deadline) {
        [last] = await p.publish([again], AbortSignal.timeout(5_000));
        if (last?.ok) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(last).toEqual({ ok: true });
      const got = await subject.read(n, 2);
      expect(got.map((m) => m.eventId)).toContain(again.eventId);
    }, 60_000);

    if (subject.features.brokerDedup) {
      it('a republished event id is stored once', async () => {
        const n = ns();
        const p = await publisher(n);
        const m = contractMessage(subject.topic(n), 'dup', 1);
        expect(failures(await p.publish([m], never))).toEqual([]);
        expect(await p.publish([m], never)).toEqual([{ ok: true }]);
        const other = contractMessage(subject.topic(n), 'dup', 2);
        expect(failures(await p.publish([other], never))).toEqual([]);
        const got = await subject.read(n, 2);
        expect(got.filter((r) => r.eventId === m.eventId)).toHaveLength(1);
      });
    }

    const relayOptions = options.relay;
    if (relayOptions) {
      const total = relayOptions.events ?? 10_000;
      const aggregates = relayOptions.aggregates ?? 200;
      it(`the relay moves ${total} events through it, every one, in per-aggregate order`, async () => {
        const n = ns();
        const schema = `contract_${n}`;
        const pool = new pg.Pool({ connectionString: relayOptions.databaseUrl, max: 6 });
        pool.on('error', () => undefined); // an idle connection the server closed: the pool replaces it
        const p = await publisher(n);
        const relay = createRelay({ pool, publisher: p, schema, batchSize: 500, pollIntervalMs: 100 });
        try {
          await migrate(pool, { schema });
          for (let from = 0; from < total; from += 1000) {
            await inTransaction(pool, (client) => {
              const events = Array.from({ length: Math.min(1000, total - from) }, (_, k) => ({
                aggregateType: 'contract',
                aggregateId: `a${(from + k) % aggregates}`,
                type: 'contract.happened',
                topic: subject.topic(n),
                payload: { i: from + k },
              }));
              return enqueue(client, events, { schema });
            });
          }
          await relay.start();
          const deadline = Date.now() + 120_000;
          for (;;) {
            const { rows } = await pool.query(`SELECT count(*)::int AS n FROM "${schema}".events`);
            if (rows[0].n === 0) break;
            if (Date.now() > deadline) throw new Error(`${rows[0].n} events still pending after 120 s`);
            await new Promise((r) => setTimeout(r, 100));
          }
          const got = await subject.read(n, total);
          expect(new Set(got.map((m) => m.eventId)).size).toBe(total);
          if (subject.features.orderedPerKey) {
            // At least once: a redelivery of an event already received is a duplicate, not a
            // reordering; each event's first arrival must follow its predecessors' first arrivals.
            const last = new Map<string, number>();
            const seen = new Set<string>();
            let violations = 0;
            for (const m of got) {
              if (seen.has(m.eventId)) continue;
              seen.add(m.eventId);
              if (m.sequence <= (last.get(m.aggregateId) ?? 0)) violations += 1;
              last.set(m.aggregateId, Math.max(last.get(m.aggregateId) ?? 0, m.sequence));
            }
            expect(violations).toBe(0);
          }
        } finally {
          await relay.stop();
          await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined);
          await pool.end();
        }
      }, 180_000);
    }

    it('close() settles publishes in flight and later publishes are refused clearly', async () => {
      const n = ns();
      const p = await subject.create(proxy.address, n);
      open.push(p);
      // Connected first, so the 200 are really in flight when close() comes.
      expect(failures(await p.publish([contractMessage(subject.topic(n), 'warm', 1)], never))).toEqual([]);
      const batch = Array.from({ length: 200 }, (_, i) =>
        contractMessage(subject.topic(n), `z${i % 20}`, i + 1),
      );
      const inFlight = p.publish(batch, never);
      await p.close();
      const outcomes = await inFlight;
      expect(outcomes).toHaveLength(200);
      // Delivered, or retryable: a shutdown must never send events to the dead list.
      for (const o of outcomes) if (!o.ok) expect(o.retryable).toBe(true);
      await expect(p.publish([contractMessage(subject.topic(n), 'late', 1)], never)).rejects.toBeInstanceOf(
        OutboxError,
      );
      await p.close();
    }, 30_000);
  });
}
