/**
 * The consumer contract's moving parts (see consumer-contract.ts): the subject a broker adapter
 * provides, the run's shared state, and the scenario each test builds: a namespace, a counting
 * inbox, a handler that writes one effect row per applied event, and waits.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { Consumer } from '../consumers/consumer.js';
import type { EnvelopeBinding } from '../envelope/bindings.js';
import {
  createInbox,
  type HandleResult,
  type Inbox,
  type InboxHandler,
  type InboxOptions,
} from '../inbox/inbox.js';
import type { InboxMessage } from '../inbox/message.js';
import type { Logger } from '../logger.js';
import type { OutboxMessage } from '../publishers/contract.js';
import { contractMessage } from './publisher-contract.js';

/**
 * What the suite hands to {@link ConsumerUnderTest.consume}: an inbox and its handler, whose
 * transaction is `Tx` (the suite's own inbox runs on node-postgres: PoolClient).
 */
export interface ConsumerSetup<Tx = pg.PoolClient> {
  readonly inbox: Inbox<unknown, Tx>;
  readonly handler: InboxHandler<unknown, Tx>;
  /** 0, 1 …: instances of one namespace share the broker-side identity (group, durable, queue) where the broker has one. */
  readonly instance: number;
  readonly concurrency: number;
  /** How soon a deferred delivery should come back, ms (small: the suite waits for it). */
  readonly deferMs: number;
  readonly signal?: AbortSignal;
  /**
   * Pass it to the adapter: the suite reads the `reason` of each message the adapter refuses
   * (a malformed envelope) from what it logs.
   */
  readonly logger: Logger;
}

/** How a subject sends a message whose envelope the suite altered (see {@link ConsumerUnderTest.envelope}). */
export interface EnvelopeSender {
  /** The binding the transport's envelope follows: the suite names the attributes as it does. */
  readonly binding: EnvelopeBinding;
  /**
   * Puts `message`'s payload where the namespace's consumer reads, with exactly `headers` as its
   * headers (user properties, fields …), in this order; a name may come twice: send it twice
   * where the transport can (a RabbitMQ header table cannot: send the second in upper case).
   * Signed where the transport is (webhook: every header). Resolves once the broker holds it —
   * a webhook request once answered, whatever the answer, and never sent again.
   */
  publish(
    namespace: string,
    message: OutboxMessage,
    headers: ReadonlyArray<readonly [string, string]>,
  ): Promise<void>;
}

export interface ConsumerUnderTest {
  readonly name: string;
  /** PostgreSQL for the inbox; the suite creates a scratch schema and drops it afterwards. */
  readonly databaseUrl: string;
  /** Creates the namespace's destination (stream, topic, queue …), before anything is published or consumed. */
  prepare?(namespace: string): Promise<void>;
  /**
   * Publishes the messages to the namespace's destination in this order, as the relay would, and
   * resolves once the broker holds them (a webhook sender may keep retrying in the background).
   * A repeated event id must reach the broker again: no broker-side deduplication here.
   * `previous`: with the envelope tx-outbox 0.1 wrote (`previousEnvelopeHeaders` of tx-outbox/testing), as a
   * relay not yet upgraded would.
   */
  publish(
    namespace: string,
    messages: readonly OutboxMessage[],
    options?: { readonly previous?: boolean },
  ): Promise<void>;
  /** Puts a message without a tx-outbox envelope where the namespace's consumer reads. */
  publishForeign(namespace: string): Promise<void>;
  /**
   * Sends messages with an altered envelope (a malformed schema version, an attribute twice):
   * the cases that check they are refused run only when it is given.
   */
  readonly envelope?: EnvelopeSender;
  /** Starts a consumer instance for the namespace. */
  consume(namespace: string, setup: ConsumerSetup): Promise<Consumer>;
  /** Whether every delivery of the namespace was acknowledged (nothing pending or awaiting redelivery). */
  settled?(namespace: string): Promise<boolean>;
  /** Removes what the namespace created on the broker. */
  cleanup?(namespace: string): Promise<void>;
  /** Upper bound for one wait of the suite, ms. Default 20000. */
  readonly timeoutMs?: number;
}

/** What the inbox answered, per event id, in the order answered. */
export class Tally {
  readonly results = new Map<string, HandleResult['status'][]>();

  record(eventId: string, status: HandleResult['status']): void {
    const list = this.results.get(eventId) ?? [];
    list.push(status);
    this.results.set(eventId, list);
  }

  count(status: HandleResult['status'], eventId?: string): number {
    const lists = eventId ? [this.results.get(eventId) ?? []] : [...this.results.values()];
    return lists.reduce((n, list) => n + list.filter((s) => s === status).length, 0);
  }

  handled(eventId: string): number {
    return this.results.get(eventId)?.length ?? 0;
  }
}

export interface Effect {
  readonly event_id: string;
  readonly aggregate_id: string;
  readonly sequence: number;
}

/** The state one contract run shares across its tests: the scratch schema, the pool, what to clean up. */
export class ContractRun {
  readonly subject: ConsumerUnderTest;
  readonly timeoutMs: number;
  readonly schema: string;
  readonly run = randomUUID().slice(0, 8);
  pool!: pg.Pool;
  counter = 0;
  readonly namespaces: string[] = [];
  readonly consumers: Consumer[] = [];

  constructor(subject: ConsumerUnderTest) {
    this.subject = subject;
    this.timeoutMs = subject.timeoutMs ?? 20_000;
    this.schema = `txo_cc_${subject.name.replace(/\W/g, '_').slice(0, 20)}_${randomBytes(4).toString('hex')}`;
  }
}

/** A fresh namespace, its consumer name and its tally; `start` runs an instance through a counting inbox. */
export async function scenario(ctx: ContractRun, inboxOptions: Partial<InboxOptions> = {}, jitter = false) {
  const { subject, schema, pool } = ctx;
  ctx.counter += 1;
  const namespace = `txo-cc-${ctx.run}-${ctx.counter}`;
  ctx.namespaces.push(namespace);
  await subject.prepare?.(namespace);
  const tally = new Tally();
  const consumer = namespace;
  const inbox = createInbox({ pool, consumer, schema, ...inboxOptions });
  const counting: Inbox = {
    consumer: inbox.consumer,
    replayReleased: (handler, options) => inbox.replayReleased(handler, options),
    stats: () => inbox.stats(),
    async handle(message: InboxMessage, handler) {
      const result = await inbox.handle(message, handler);
      tally.record(message.eventId, result.status);
      return result;
    },
  };
  /** The `reason` of every line the adapter logged with one (refused messages). */
  const reasons: string[] = [];
  const note = (obj: object): void => {
    const reason = (obj as { reason?: unknown }).reason;
    if (typeof reason === 'string') reasons.push(reason);
  };
  const logger: Logger = { debug: note, info: note, warn: note, error: note };
  let failing: ((aggregateId: string) => boolean) | undefined;
  let gate: Promise<void> | undefined;
  let running = 0;
  let maxRunning = 0;
  const handler: InboxHandler = async (tx, event) => {
    running += 1;
    maxRunning = Math.max(maxRunning, running);
    try {
      if (gate) await gate;
      if (failing?.(event.aggregateId)) throw new Error(`refused ${event.aggregateId} on purpose`);
      await tx.query(
        `INSERT INTO "${schema}".effects (consumer, event_id, aggregate_id, sequence) VALUES ($1, $2, $3, $4)`,
        [consumer, event.eventId, event.aggregateId, event.sequence],
      );
      // A random pause: deliveries of one aggregate run side by side, they would finish out of order.
      await new Promise((resolve) => setTimeout(resolve, jitter ? Math.random() * 10 : 1));
    } finally {
      running -= 1;
    }
  };
  const s = {
    namespace,
    tally,
    message: (aggregateId: string, sequence: number, extra: Partial<OutboxMessage> = {}) =>
      contractMessage(namespace, aggregateId, sequence, { schemaVersion: 1, ...extra }),
    publish: (...messages: OutboxMessage[]) => subject.publish(namespace, messages),
    /** Publishes with the envelope tx-outbox 0.1 wrote. */
    publishPrevious: (...messages: OutboxMessage[]) =>
      subject.publish(namespace, messages, { previous: true }),
    async start(instance = 0, options: { concurrency?: number; signal?: AbortSignal } = {}) {
      const c = await subject.consume(namespace, {
        inbox: counting,
        handler,
        instance,
        concurrency: options.concurrency ?? 4,
        deferMs: 150,
        logger,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      ctx.consumers.push(c);
      return c;
    },
    async applied(): Promise<Effect[]> {
      const { rows } = await pool.query<Effect>(
        `SELECT event_id, aggregate_id, sequence FROM "${schema}".effects WHERE consumer = $1 ORDER BY n`,
        [consumer],
      );
      return rows;
    },
    async quarantined(): Promise<Array<{ event_id: string; reason: string }>> {
      const { rows } = await pool.query(
        `SELECT event_id::text, reason FROM "${schema}".inbox_quarantine WHERE consumer = $1 ORDER BY event_id`,
        [consumer],
      );
      return rows;
    },
    settled: async () => (subject.settled ? subject.settled(namespace) : true),
    /** The reasons the adapter logged for the messages it refused, in order. */
    reasons: (): readonly string[] => reasons,
    failWhen(predicate: (aggregateId: string) => boolean) {
      failing = predicate;
    },
    hold(): () => void {
      let release!: () => void;
      gate = new Promise((resolve) => {
        release = resolve;
      });
      return () => {
        gate = undefined;
        release();
      };
    },
    get running() {
      return running;
    },
    get maxRunning() {
      return maxRunning;
    },
  };
  return s;
}

/** Polls `check` until it holds, or throws after the subject's time limit. */
export async function until(
  ctx: ContractRun,
  what: string,
  check: () => Promise<boolean> | boolean,
): Promise<void> {
  const { subject, timeoutMs } = ctx;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`${subject.name}: timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

export const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
