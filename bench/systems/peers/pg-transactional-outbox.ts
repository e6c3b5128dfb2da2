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
 *   listener per slot: `relays` > 1 is refused.
 *
 * Tables and the polling function live in `ctx.schema`; the publication and the replication
 * slot (server-wide objects) are dropped in teardown.
 */
import { randomUUID } from 'node:crypto';
import {
  createReplicationSegmentMutexConcurrencyController,
  DatabaseSetup,
  type GeneralMessageHandler,
  getDefaultLogger,
  initializeMessageStorage,
  initializePollingMessageListener,
  initializeReplicationMessageListener,
  type ListenerSettings,
  type TransactionalLogger,
} from 'pg-transactional-outbox';
import type { BenchContext, DrainResult, DrainSystem, DrainWorkload } from '../types.js';
import { benchEvent, inChunks } from '../workload.js';
import { AckCounter, type Broker, inTransaction, openBroker, subjectOf } from './shared.js';

export interface PollingOptions {
  /** Messages handled concurrently (`nextMessagesBatchSize`). Default 5. */
  readonly batchSize?: number;
  /** `nextMessagesPollingIntervalInMs`. Default 250. */
  readonly pollingIntervalMs?: number;
}

type Mode = { readonly kind: 'polling'; readonly options: PollingOptions } | { readonly kind: 'replication' };

const TABLE = 'outbox';
const NEXT_MESSAGES = 'next_outbox_messages';

function quietLogger(): TransactionalLogger {
  const logger = getDefaultLogger('pg-transactional-outbox');
  logger.level = 'error';
  return logger;
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
  const names = (ctx: BenchContext) => ({ publication: `${ctx.schema}_pub`, slot: `${ctx.schema}_slot` });
  const settings = (ctx: BenchContext): ListenerSettings => ({
    dbSchema: ctx.schema,
    dbTable: TABLE,
    enableMaxAttemptsProtection: false,
    enablePoisonousMessageProtection: false,
  });

  async function setUp(ctx: BenchContext): Promise<void> {
    if (mode.kind === 'replication') {
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
    if (mode.kind === 'polling') {
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

  return {
    name: `pg-transactional-outbox (${mode.kind})`,

    async load(ctx: BenchContext, workload: DrainWorkload): Promise<void> {
      await setUp(ctx);
      const store = initializeMessageStorage({ outboxOrInbox: 'outbox', settings: settings(ctx) }, logger);
      await inChunks(workload.events, 1000, (from, count) =>
        inTransaction(ctx.pool, async (client) => {
          for (let k = 0; k < count; k++) {
            const event = benchEvent(from + k, workload.aggregates, workload.payloadBytes);
            await store(
              {
                id: randomUUID(),
                aggregateType: event.aggregateType,
                aggregateId: event.aggregateId,
                messageType: event.type,
                segment: event.aggregateId,
                payload: event.payload,
                metadata: { subject: subjectOf(ctx, event) },
              },
              client,
            );
          }
        }),
      );
    },

    async drain(ctx: BenchContext, workload: DrainWorkload): Promise<DrainResult> {
      if (mode.kind === 'replication' && workload.relays > 1) {
        throw new Error(
          'pg-transactional-outbox (replication): one listener per replication slot, relays must be 1',
        );
      }
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
      if (mode.kind === 'polling') {
        for (let r = 0; r < workload.relays; r++) {
          const pollingSettings = {
            ...settings(ctx),
            nextMessagesFunctionSchema: ctx.schema,
            nextMessagesFunctionName: NEXT_MESSAGES,
            nextMessagesBatchSize: mode.options.batchSize ?? 5,
            nextMessagesPollingIntervalInMs: mode.options.pollingIntervalMs ?? 250,
          };
          const config = {
            outboxOrInbox: 'outbox' as const,
            dbListenerConfig: db,
            settings: pollingSettings,
          };
          shutdowns.push(initializePollingMessageListener(config, handler, logger)[0]);
        }
      } else {
        const { publication, slot } = names(ctx);
        const replicationSettings = { ...settings(ctx), dbPublication: publication, dbReplicationSlot: slot };
        const config = {
          outboxOrInbox: 'outbox' as const,
          dbListenerConfig: db,
          settings: replicationSettings,
        };
        const concurrencyStrategy = createReplicationSegmentMutexConcurrencyController();
        shutdowns.push(
          initializeReplicationMessageListener(config, handler, logger, { concurrencyStrategy })[0],
        );
      }
      shutdown = async () => {
        await Promise.all(shutdowns.map((stop) => stop()));
      };
      return await acks.done();
    },

    async teardown(ctx: BenchContext): Promise<void> {
      await shutdown?.();
      shutdown = undefined;
      await broker?.close();
      broker = undefined;
      if (mode.kind === 'replication') await dropReplicationObjects(ctx, names(ctx));
    },
  };
}

/** Drops the slot (retrying while the walsender that used it winds down) and the publication. */
async function dropReplicationObjects(
  ctx: BenchContext,
  { publication, slot }: { publication: string; slot: string },
): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await ctx.pool.query(
        'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
        [slot],
      );
      break;
    } catch (error) {
      if (attempt >= 50) throw error;
      await ctx.pool.query(
        'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active',
        [slot],
      );
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  await ctx.pool.query(`DROP PUBLICATION IF EXISTS ${publication}`);
}
