/**
 * pg-transactional-outbox 0.5: the producer stores each message with the library's
 * `initializeMessageStorage` in its business transaction; a `GeneralMessageHandler`
 * publishes it to JetStream. Both of its listeners run as separate systems:
 *
 * - polling (`initializePollingMessageListener`): its SQL function returns only the oldest
 *   unprocessed message of each `segment`, so with `segment` = aggregate id it holds
 *   per-aggregate order. Settings from the README's example: `nextMessagesBatchSize: 5`,
 *   `nextMessagesPollingIntervalInMs: 250`; `enableMaxAttemptsProtection` and
 *   `enablePoisonousMessageProtection` off (the outbox defaults). Each message is then locked,
 *   handled and marked processed in a transaction of its own.
 * - logical replication (`initializeReplicationMessageListener`, pgoutput): needs
 *   `wal_level = logical`. With `createReplicationSegmentMutexConcurrencyController`, messages
 *   of one segment (= aggregate) are handled one after another, in commit order, and other
 *   segments in parallel (the default mutex controller would serialise everything). One
 *   listener per slot: `relays` > 1 is refused. It runs in a process of its own
 *   (pto-listener-process.ts, for its CPU) and publishes through tx-outbox's lean pipeline
 *   publisher; the drain is done when the stream holds every event. W2 runs it too
 *   (`ptoReplicationLatencySystem`).
 *
 * Tables and the polling function live in `ctx.schema`; the publication and the replication
 * slot (server-wide objects) are dropped in teardown.
 */

import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  DatabaseSetup,
  type GeneralMessageHandler,
  getDefaultLogger,
  initializeMessageStorage,
  initializePollingMessageListener,
  type ListenerSettings,
  type TransactionalLogger,
} from 'pg-transactional-outbox';
import { CpuMeter } from '../../cpu.js';
import type { LatencySystem } from '../../workloads/latency.js';
import type { LatencyEnqueue, ProducerContext } from '../../workloads/latency-ends.js';
import { type RelayChild, stopRelay, streamCounter, whenStarted } from '../child.js';
import type { BenchContext, DrainResult, DrainSystem, DrainWorkload } from '../types.js';
import { benchEvent, inChunks } from '../workload.js';
import {
  AckCounter,
  type Broker,
  dropReplicationObjects,
  inTransaction,
  openBroker,
  subjectOf,
} from './shared.js';

export interface PollingOptions {
  /** Messages handled concurrently (`nextMessagesBatchSize`). Default 5. */
  readonly batchSize?: number;
  /** `nextMessagesPollingIntervalInMs`. Default 250. */
  readonly pollingIntervalMs?: number;
}

type Mode = { readonly kind: 'polling'; readonly options: PollingOptions } | { readonly kind: 'replication' };

const TABLE = 'outbox';
const NEXT_MESSAGES = 'next_outbox_messages';
const LISTENER_PROCESS = join(dirname(fileURLToPath(import.meta.url)), 'pto-listener-process.ts');

function quietLogger(): TransactionalLogger {
  const logger = getDefaultLogger('pg-transactional-outbox');
  logger.level = 'error';
  return logger;
}

const names = (ctx: BenchContext) => ({ publication: `${ctx.schema}_pub`, slot: `${ctx.schema}_slot` });
const applicationNameOf = (ctx: BenchContext): string => `pto-${ctx.schema}`;
const settings = (ctx: Pick<BenchContext, 'schema'>): ListenerSettings => ({
  dbSchema: ctx.schema,
  dbTable: TABLE,
  enableMaxAttemptsProtection: false,
  enablePoisonousMessageProtection: false,
});

/** The library's table (and polling function, or publication and slot) in `ctx.schema`. */
async function setUp(ctx: BenchContext, kind: Mode['kind']): Promise<void> {
  if (kind === 'replication') {
    const { rows } = await ctx.pool.query<{ wal_level: string }>('SHOW wal_level');
    if (rows[0]?.wal_level !== 'logical') {
      throw new Error(
        `SKIP: pg-transactional-outbox replication needs wal_level = logical, the server has ${rows[0]?.wal_level}` +
          ' (changing it needs a PostgreSQL restart)',
      );
    }
  }
  const setup = {
    outboxOrInbox: 'outbox' as const,
    database: '',
    schema: ctx.schema,
    table: TABLE,
    listenerRole: '',
    nextMessagesName: NEXT_MESSAGES,
    ...names(ctx),
  };
  await ctx.pool.query(DatabaseSetup.dropAndCreateTable(setup));
  if (kind === 'polling') {
    await ctx.pool.query(DatabaseSetup.createPollingFunction(setup));
    await ctx.pool.query(DatabaseSetup.setupPollingIndexes(setup));
    return;
  }
  // The library's setupReplicationCore without its ALTER ROLE (we connect as a superuser).
  await ctx.pool.query(
    `CREATE PUBLICATION ${setup.publication} FOR TABLE ${ctx.schema}.${TABLE} WITH (publish = 'insert')`,
  );
  // Before the backlog is written, so the slot sees it; in a transaction of its own.
  await ctx.pool.query(DatabaseSetup.setupReplicationSlot({ ...setup, replicationSlot: setup.slot }));
}

/** The replication listener process (pto-listener-process.ts) on the context's slot and stream. */
function spawnListener(ctx: BenchContext): RelayChild {
  const config = {
    databaseUrl: ctx.databaseUrl,
    schema: ctx.schema,
    table: TABLE,
    ...names(ctx),
    natsUrl: ctx.natsUrl,
    stream: ctx.stream,
    applicationName: applicationNameOf(ctx),
  };
  const child = spawn(process.execPath, ['--import', 'tsx', LISTENER_PROCESS], {
    env: { ...process.env, TXO_BENCH_PTO: JSON.stringify(config) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: string[] = [];
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => lines.push(...chunk.split('\n').filter(Boolean)));
  return { child, lines };
}

/** A CPU meter for the listener process, its connections and its slot's walsender. */
function listenerCpu(ctx: BenchContext, listener: RelayChild): CpuMeter {
  return new CpuMeter(ctx.pool, {
    relayPids: [listener.child.pid!],
    applicationName: applicationNameOf(ctx),
    slot: names(ctx).slot,
  });
}

/** pg-transactional-outbox with its polling listener. */
export function pgTransactionalOutboxPollingSystem(options: PollingOptions = {}): DrainSystem {
  return pgTransactionalOutboxSystem({ kind: 'polling', options });
}

/** pg-transactional-outbox with its logical replication listener (needs `wal_level = logical`). */
export function pgTransactionalOutboxReplicationSystem(): DrainSystem {
  return pgTransactionalOutboxSystem({ kind: 'replication' });
}

function pgTransactionalOutboxSystem(mode: Mode): DrainSystem {
  const logger = quietLogger();
  let shutdown: (() => Promise<void>) | undefined;
  let broker: Broker | undefined;
  let listener: RelayChild | undefined;

  async function drainReplication(ctx: BenchContext, workload: DrainWorkload): Promise<DrainResult> {
    if (workload.relays > 1) {
      throw new Error(
        'pg-transactional-outbox (replication): one listener per replication slot, relays must be 1',
      );
    }
    listener = spawnListener(ctx);
    const stream = await streamCounter(ctx);
    await whenStarted(listener);
    const cpu = listenerCpu(ctx, listener);
    await cpu.sample();
    const started = performance.now();
    let lastProgress = started;
    let stored = 0;
    let polls = 0;
    try {
      while (stored < workload.events) {
        await new Promise((r) => setTimeout(r, 20));
        const now = await stream.count();
        if (now > stored) lastProgress = performance.now();
        else if (performance.now() - lastProgress > 60_000) {
          throw new Error(`no broker ack for 60 s (${now}/${workload.events} stored)`);
        }
        stored = now;
        if (++polls % 5 === 0) await cpu.sample();
      }
    } finally {
      await stream.close();
    }
    const seconds = (performance.now() - started) / 1000;
    await cpu.sample();
    const peakRssMb = await stopRelay(listener);
    listener = undefined;
    return {
      seconds,
      delivered: workload.events,
      cpu: cpu.per1000(workload.events),
      ...(peakRssMb === undefined ? {} : { peakRssMb }),
    };
  }

  return {
    name: `pg-transactional-outbox (${mode.kind})`,

    async load(ctx: BenchContext, workload: DrainWorkload): Promise<void> {
      await setUp(ctx, mode.kind);
      const store = initializeMessageStorage({ outboxOrInbox: 'outbox', settings: settings(ctx) }, logger);
      const sequences = new Map<string, number>();
      await inChunks(workload.events, 1000, (from, count) =>
        inTransaction(ctx.pool, async (client) => {
          for (let k = 0; k < count; k++) {
            const event = benchEvent(from + k, workload.aggregates, workload.payloadBytes);
            const sequence = (sequences.get(event.aggregateId) ?? 0) + 1;
            sequences.set(event.aggregateId, sequence);
            await store(
              {
                id: randomUUID(),
                aggregateType: event.aggregateType,
                aggregateId: event.aggregateId,
                messageType: event.type,
                segment: event.aggregateId,
                payload: event.payload,
                metadata: { subject: subjectOf(ctx, event), sequence },
              },
              client,
            );
          }
        }),
      );
    },

    async drain(ctx: BenchContext, workload: DrainWorkload): Promise<DrainResult> {
      if (mode.kind === 'replication') return await drainReplication(ctx, workload);
      const js = await openBroker(ctx);
      broker = js;
      const acks = new AckCounter(workload.events);
      const handler: GeneralMessageHandler = {
        async handle(message) {
          await js.publish(
            String(message.metadata?.['subject']),
            JSON.stringify(message.payload),
            message.id,
          );
          acks.ack(message.id);
        },
      };
      const db = { connectionString: ctx.databaseUrl };
      const shutdowns: (() => Promise<void>)[] = [];
      for (let r = 0; r < workload.relays; r++) {
        const pollingSettings = {
          ...settings(ctx),
          nextMessagesFunctionSchema: ctx.schema,
          nextMessagesFunctionName: NEXT_MESSAGES,
          nextMessagesBatchSize: mode.kind === 'polling' ? (mode.options.batchSize ?? 5) : 5,
          nextMessagesPollingIntervalInMs:
            mode.kind === 'polling' ? (mode.options.pollingIntervalMs ?? 250) : 250,
        };
        const config = {
          outboxOrInbox: 'outbox' as const,
          dbListenerConfig: db,
          settings: pollingSettings,
        };
        shutdowns.push(initializePollingMessageListener(config, handler, logger)[0]);
      }
      shutdown = async () => {
        await Promise.all(shutdowns.map((stop) => stop()));
      };
      return await acks.done();
    },

    async teardown(ctx: BenchContext): Promise<void> {
      listener?.child.kill('SIGKILL');
      listener = undefined;
      await shutdown?.();
      shutdown = undefined;
      await broker?.close();
      broker = undefined;
      if (mode.kind === 'replication') await dropReplicationObjects(ctx, names(ctx));
    },
  };
}

/**
 * W2 for pg-transactional-outbox's replication listener: the producer stores each message with
 * `initializeMessageStorage` in its business transaction; the listener process publishes it.
 */
export function ptoReplicationLatencySystem(): LatencySystem {
  let listener: RelayChild | undefined;
  return {
    name: 'pg-transactional-outbox (replication)',
    async start(ctx) {
      await setUp(ctx, 'replication');
      listener = spawnListener(ctx);
      await whenStarted(listener);
      return listenerCpu(ctx, listener);
    },
    producer: {
      module: 'bench/systems/peers/pg-transactional-outbox.ts',
      factory: 'ptoLatencyEnqueue',
    },
    async stop(ctx) {
      if (listener) await stopRelay(listener);
      listener = undefined;
      await dropReplicationObjects(ctx, names(ctx));
    },
  };
}

/** W2's producer write for pg-transactional-outbox: `initializeMessageStorage` in the business transaction. */
export function ptoLatencyEnqueue(ctx: ProducerContext): LatencyEnqueue {
  const store = initializeMessageStorage({ outboxOrInbox: 'outbox', settings: settings(ctx) }, quietLogger());
  return async (client, event) => {
    const id = randomUUID();
    await store(
      {
        id,
        aggregateType: 'order',
        aggregateId: event.aggregateId,
        messageType: 'order.placed',
        segment: event.aggregateId,
        payload: event.payload,
        metadata: { subject: event.topic, sequence: event.sequence },
      },
      client,
    );
    return id;
  };
}
