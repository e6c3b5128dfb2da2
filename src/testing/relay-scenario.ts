/**
 * What {@link relayContract}'s cases share: the subject's shape, a scratch schema per case, a
 * producer that commits events in `table` or `wal` mode, the deliveries a broker saw, and the
 * checks on them (nothing lost, nothing phantom, per-aggregate order of first deliveries).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { type EnqueueOptions, enqueue } from '../producer/enqueue.js';
import type { OutboxEvent } from '../producer/event.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../publishers/contract.js';
import { permanent } from '../publishers/core/outcomes.js';
import type { RelayHealth } from '../relay/health.js';
import type { RelayOptions } from '../relay/options.js';
import type { RelayStats } from '../relay/stats.js';
import { migrate } from '../schema/migrate.js';
import type { Address } from './tcp-proxy.js';

/** The contract's cases, by name: what a relay declares it cannot honour. */
export const RELAY_CASES = [
  'order',
  'rollback',
  'poison',
  'outage',
  'fencing',
  'stop',
  'kill',
  'restart',
  'history',
] as const;
export type RelayCase = (typeof RELAY_CASES)[number];

export interface RelayFeatures {
  /** How producers write the events this relay reads: `enqueue`'s default (`table`) or `via: 'wal'`. */
  readonly via: 'table' | 'wal';
  /**
   * Cases this relay cannot honour, each with the reason. The suite reports each as a skipped
   * test whose name carries the reason: never a silent skip.
   */
  readonly cannot?: Partial<Record<RelayCase, string>>;
  /** What the `fencing` case proves for this relay (its fence, in a sentence; shown in the test name). */
  readonly fence: string;
}

/** The part of `Relay` / `CdcRelay` the suite drives. */
export interface ContractRelay {
  readonly id: string;
  start(): Promise<void>;
  stop(options?: { timeout?: number }): Promise<void>;
  stats(): Pick<RelayStats, 'published' | 'dead' | 'unavailable'>;
  health(): Pick<RelayHealth, 'running'>;
}

/** One publish the broker accepted (duplicates included), in the order it arrived. */
export interface SeenMessage {
  readonly eventId: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly type: string;
}

/** The real broker, seen from the suite. */
export interface RelayBroker {
  /** Where the broker listens: the suite puts a TcpProxy in front of it to cut it. */
  readonly address: Address;
  /** A publisher connected to `address` (the proxy) for the destinations of `namespace`. */
  publisher(address: Address, namespace: string): Publisher | Promise<Publisher>;
  /** The topic an event must carry to land in `namespace`. */
  topic(namespace: string): string;
  /** Starts watching every publish into `namespace` (duplicates included), in arrival order. */
  watch(namespace: string): Promise<{ readonly seen: readonly SeenMessage[]; close(): Promise<void> }>;
  /** Removes what the namespace created on the broker. */
  cleanup?(namespace: string): Promise<void>;
}

/**
 * What a relay in a child process does with its publishes: `normal`; `kill-after-publish`
 * holds each publish `delayMs` (the relay reads ahead meanwhile) and SIGKILLs its own process
 * right after the broker acknowledged its `afterBatches`-th batch, before the relay could record
 * anything; `slow-fail` reports its first batch in flight, waits
 * `delayMs`, then answers every message of it with a permanent failure (unfenced, they would go
 * dead), and publishes normally afterwards.
 */
export type ChildMode =
  | { readonly kind: 'normal' }
  | { readonly kind: 'kill-after-publish'; readonly afterBatches: number; readonly delayMs?: number }
  | { readonly kind: 'slow-fail'; readonly delayMs: number };

/** What the suite asks of a child relay. */
export interface ChildRelayConfig {
  readonly databaseUrl: string;
  readonly schema: string;
  readonly namespace: string;
  readonly relayId: string;
  readonly leaseMs: number;
  readonly batchSize: number;
  readonly mode: ChildMode;
}

/** A line the child prints about its publisher (see `relayChildPublisher`). */
export interface ChildReport {
  readonly event: 'started' | 'publishing' | 'published' | 'refused' | 'killing';
  readonly ids?: readonly string[];
}

/** A relay running in a child process. */
export interface RelayChild {
  /** Waits until the child reported `event` (the n-th time); rejects if it exits or times out. */
  until(event: ChildReport['event'], timeoutMs?: number): Promise<ChildReport>;
  /** Every report so far. */
  reports(): readonly ChildReport[];
  /** SIGSTOP / SIGCONT. */
  pause(): void;
  resume(): void;
  /** SIGKILL, waiting until it is gone. */
  kill(): Promise<void>;
  /** Resolves when it exited, with the signal that ended it. */
  exited(): Promise<{ code: number | null; signal: string | null }>;
}

/** One committed producer transaction: its event ids and a WAL position at or after its commit. */
export interface CommitMark {
  readonly ids: readonly string[];
  /** pg_current_wal_insert_lsn() read right after COMMIT returned, as a number. */
  readonly walLsn: bigint;
}

export interface RelayUnderTest {
  /** Shown in the suite's name, e.g. `cdc (wal mode)`. */
  readonly name: string;
  readonly features: RelayFeatures;
  /** The PostgreSQL the suite migrates a scratch schema in per case (a private one for `restart`). */
  readonly databaseUrl: string;
  /**
   * Restarts that PostgreSQL (`fast`: sessions ended and a checkpoint; `immediate`: a crash,
   * recovery at start), resolving once it accepts connections again.
   */
  restartDatabase?(mode: 'fast' | 'immediate'): Promise<void>;
  readonly broker: RelayBroker;
  /** Gets a freshly migrated schema ready for this relay (CDC: its slot and publication). */
  prepare?(pool: pg.Pool, schema: string): Promise<void>;
  /** Removes what `prepare` or the relay made outside the schema (CDC: the slot). */
  cleanup?(pool: pg.Pool, schema: string): Promise<void>;
  /**
   * The relay under test with these options (the subject adds its own, e.g. a CDC relay's short
   * heartbeat): `createRelay(options)`, `createCdcRelay({ ...options, heartbeatMs })`.
   */
  create(options: RelayOptions): ContractRelay;
  /**
   * The events of `commits` this relay had recorded as delivered, read after it was killed
   * (`kill`): none of them may be published again. Default: those `findEvent` finds published
   * (the polling relay records a delivery in its outcome statement). A CDC relay answers with the
   * commits at or before its slot's confirmed position (`cdcSlotStatus`).
   */
  recorded?(pool: pg.Pool, schema: string, commits: readonly CommitMark[]): Promise<ReadonlySet<string>>;
  /** The same relay in a child process (for `kill` and `fencing`), publishing per `config.mode`. */
  spawn?(config: ChildRelayConfig): RelayChild;
  /** How long one case may take, ms. Default 60000. */
  readonly timeoutMs?: number;
}

export const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it holds; throws naming `what` (evaluated at the failure). */
export async function until(
  what: string | (() => string),
  check: () => boolean | Promise<boolean>,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`,
      );
    await pause(25);
  }
}

/** A pg error or a dropped connection: worth one more try of a statement never committed. */
function transient(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code !== 'string' || /^(08|57P|53|40)/.test(code) || code === 'ECONNREFUSED';
}

/** `count` events over `aggregates` aggregates `<prefix><i % aggregates>`. */
export function contractEvents(
  topic: string,
  count: number,
  aggregates: number,
  { prefix = 'a', from = 0, type = 'contract.happened' } = {},
): OutboxEvent[] {
  return Array.from({ length: count }, (_, k) => ({
    aggregateType: 'contract',
    aggregateId: `${prefix}${(from + k) % aggregates}`,
    type,
    topic,
    payload: { i: from + k },
  }));
}

/** One case's world: its schema, pool, broker namespace, proxy address and what it started. */
export class RelayCaseRun {
  readonly schema = `rc_${randomBytes(4).toString('hex')}`;
  readonly namespace = `rc${randomBytes(4).toString('hex')}`;
  readonly committed: string[] = [];
  readonly commits: CommitMark[] = [];
  private readonly stops: Array<() => Promise<unknown>> = [];
  pool!: pg.Pool;

  constructor(
    readonly subject: RelayUnderTest,
    readonly proxy: Address,
  ) {}

  get via(): 'table' | 'wal' {
    return this.subject.features.via;
  }

  get topic(): string {
    return this.subject.broker.topic(this.namespace);
  }

  async open(): Promise<this> {
    this.pool = new pg.Pool({ connectionString: this.subject.databaseUrl, max: 10 });
    this.pool.on('error', () => undefined); // an idle connection a restart closed: replaced
    await migrate(this.pool, { schema: this.schema, partitions: 8 });
    await this.subject.prepare?.(this.pool, this.schema);
    return this;
  }

  /** Runs `stop` when the case ends (last registered, first run). */
  onClose(stop: () => Promise<unknown>): void {
    this.stops.push(stop);
  }

  async close(): Promise<void> {
    for (const stop of this.stops.splice(0).reverse()) await stop().catch(() => undefined);
    await this.subject.cleanup?.(this.pool, this.schema).catch(() => undefined);
    await this.subject.broker.cleanup?.(this.namespace).catch(() => undefined);
    await this.pool.query(`DROP SCHEMA IF EXISTS "${this.schema}" CASCADE`).catch(() => undefined);
    await this.pool.end().catch(() => undefined);
  }

  async watch(): Promise<{ readonly seen: readonly SeenMessage[] }> {
    const w = await this.subject.broker.watch(this.namespace);
    this.onClose(() => w.close());
    return w;
  }

  /** A relay of the subject on this schema, publishing through the proxy (`wrap` may alter the publisher). */
  async relay(
    options: Partial<RelayOptions> = {},
    wrap: (p: Publisher) => Publisher = (p) => p,
  ): Promise<ContractRelay> {
    const publisher = wrap(await this.subject.broker.publisher(this.proxy, this.namespace));
    const relay = this.subject.create({
      pool: this.pool,
      publisher,
      schema: this.schema,
      leaseMs: 1500,
      pollIntervalMs: 100,
      batchSize: 20,
      maxAttempts: 3,
      backoff: { baseMs: 50, capMs: 200 },
      history: true,
      ...options,
    });
    this.onClose(() => relay.stop({ timeout: 2000 }));
    return relay;
  }

  /** A child relay of the subject on this schema (the broker directly, not the proxy). */
  child(mode: ChildMode, relayId: string, batchSize = 20): RelayChild {
    if (!this.subject.spawn) throw new Error(`${this.subject.name}: spawn() is needed for this case`);
    const child = this.subject.spawn({
      databaseUrl: this.subject.databaseUrl,
      schema: this.schema,
      namespace: this.namespace,
      relayId,
      leaseMs: 1200,
      batchSize,
      mode,
    });
    this.onClose(() => child.kill());
    return child;
  }

  /**
   * Commits `events`, `perTx` per transaction, in the subject's mode; remembers their ids. A
   * transaction is retried (a restart) only if its COMMIT was never sent.
   */
  async produce(events: readonly OutboxEvent[], perTx = 10, rollback = false): Promise<string[]> {
    const options = { schema: this.schema, via: this.via } as EnqueueOptions;
    const ids: string[] = [];
    for (let i = 0; i < events.length; i += perTx) {
      const chunk = events.slice(i, i + perTx);
      for (let attempt = 1; ; attempt++) {
        let commitSent = false;
        let client: pg.PoolClient | undefined;
        try {
          client = await this.pool.connect();
          await client.query('BEGIN');
          const results = await enqueue(client, chunk, options);
          commitSent = true;
          await client.query(rollback ? 'ROLLBACK' : 'COMMIT');
          const done = results.map((r) => r.eventId);
          if (!rollback) {
            const { rows } = await client.query<{ lsn: string }>(
              `SELECT (pg_current_wal_insert_lsn() - '0/0')::text AS lsn`,
            );
            this.commits.push({ ids: done, walLsn: BigInt(rows[0]!.lsn) });
          }
          client.release();
          ids.push(...done);
          break;
        } catch (error) {
          await client?.query('ROLLBACK').catch(() => undefined);
          client?.release(true);
          if (commitSent || attempt >= 60 || !transient(error)) throw error;
          await pause(250);
        }
      }
    }
    if (!rollback) this.committed.push(...ids);
    return ids;
  }
}

/** The first delivery of each event id, in arrival order. */
export function firstDeliveries(seen: readonly SeenMessage[]): SeenMessage[] {
  const ids = new Set<string>();
  return seen.filter((m) => !ids.has(m.eventId) && ids.add(m.eventId) !== undefined);
}

/** Per aggregate, the sequences of first deliveries must run 1, 2, 3 … (at most `limit` problems). */
export function orderViolations(seen: readonly SeenMessage[], limit = 20): string[] {
  const last = new Map<string, number>();
  const problems: string[] = [];
  for (const m of firstDeliveries(seen)) {
    const prev = last.get(m.aggregateId) ?? 0;
    if (m.sequence !== prev + 1 && problems.length < limit)
      problems.push(`${m.aggregateId}: ${m.sequence} first delivered after ${prev}`);
    last.set(m.aggregateId, Math.max(prev, m.sequence));
  }
  return problems;
}

/** Ids in `expected` never seen (at most 20). */
export function missing(expected: readonly string[], seen: readonly SeenMessage[]): string[] {
  const got = new Set(seen.map((m) => m.eventId));
  return expected.filter((id) => !got.has(id)).slice(0, 20);
}

/** Ids seen that are not in `expected` (at most 20). */
export function phantoms(expected: readonly string[], seen: readonly SeenMessage[]): string[] {
  const known = new Set(expected);
  return [...new Set(seen.map((m) => m.eventId))].filter((id) => !known.has(id)).slice(0, 20);
}

/** Whether every id of `ids` was seen. */
export function allSeen(ids: readonly string[], seen: readonly SeenMessage[]): boolean {
  return missing(ids, seen).length === 0;
}

/**
 * A publisher that answers the events `refuse` picks with a permanent failure (without
 * publishing them) and hands the rest to `inner`; `delayMs` holds every publish call that long
 * first, and `gate` until the promise it returns settles (either aborted by the relay's signal).
 */
export function faultyPublisher(
  inner: Publisher,
  {
    refuse = () => false,
    delayMs = () => 0,
    gate = () => Promise.resolve(),
    onPublish = () => undefined,
  }: {
    refuse?: (m: OutboxMessage) => boolean;
    delayMs?: () => number;
    gate?: () => Promise<void>;
    onPublish?: (batch: readonly OutboxMessage[]) => void;
  },
): Publisher {
  return {
    name: inner.name,
    async publish(batch, signal): Promise<PublishOutcome[]> {
      onPublish(batch);
      const wait = delayMs();
      if (wait > 0)
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, wait);
          signal.addEventListener('abort', () => {
            clearTimeout(timer);
            resolve();
          });
        });
      const aborted = new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
      await Promise.race([gate(), aborted]);
      signal.throwIfAborted();
      const refused = batch.map((m) => refuse(m));
      const passed = batch.filter((_, i) => !refused[i]);
      const outcomes = passed.length > 0 ? await inner.publish(passed, signal) : [];
      let next = 0;
      return batch.map((m, i) => (refused[i] ? permanent(`contract: ${m.type} refused`) : outcomes[next++]!));
    },
    close: () => inner.close(),
  };
}
