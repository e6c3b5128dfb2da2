/**
 * pg-transactional-outbox's logical replication listener in a process of its own (so its CPU
 * is read apart from the harness, as the tx-outbox relay's is), set up as its README does:
 * `initializeReplicationMessageListener` on the publication and slot the harness created, with
 * `createReplicationSegmentMutexConcurrencyController` (one segment = one aggregate at a time,
 * in commit order; other segments in parallel). Its `GeneralMessageHandler` publishes each
 * message into JetStream through tx-outbox's own lean publish (`natsPublisher`, pipeline mode:
 * core NATS publishes with a reply subject, all PubAcks on one subscription, the same
 * CloudEvents headers and `Nats-Msg-Id`), so the broker side costs what it costs the relay and
 * the listener is what is compared.
 *
 * The per-message processing timeout (default 15 s) is raised to 10 minutes, as the README shows
 * setting it (`messageProcessingTimeoutStrategy`): it runs from the moment a message is handed
 * on, so it includes the wait for one of the handler pool's 10 connections; with a backlog of
 * more than ~15 s of work, messages time out and the library gives them up (acknowledges them
 * unpublished: 20 of a 30,000 backlog on this machine, left unprocessed in its table).
 *
 * Run by bench/systems/peers/pg-transactional-outbox.ts with `node --import tsx`. Config in
 * TXO_BENCH_PTO (JSON): { databaseUrl, schema, table, publication, slot, natsUrl, stream,
 * applicationName }. Prints {"started":true} once the listener is initialised; on SIGTERM shuts
 * it down and prints { peakRssMb }.
 */
import { readFileSync } from 'node:fs';
import {
  createReplicationSegmentMutexConcurrencyController,
  type GeneralMessageHandler,
  getDefaultLogger,
  initializeReplicationMessageListener,
  type StoredTransactionalMessage,
} from 'pg-transactional-outbox';
import type { OutboxMessage } from '../../../src/publishers/contract.js';
import { natsPublisher } from '../../../src/publishers/nats/index.js';

interface Config {
  readonly databaseUrl: string;
  readonly schema: string;
  readonly table: string;
  readonly publication: string;
  readonly slot: string;
  readonly natsUrl: string;
  readonly stream: string;
  readonly applicationName: string;
}

const cfg = JSON.parse(process.env['TXO_BENCH_PTO'] ?? '{}') as Config;
const logger = getDefaultLogger('pg-transactional-outbox');
logger.level = 'error';

const publisher = natsPublisher({ url: cfg.natsUrl, stream: cfg.stream, mode: 'pipeline' });
const signal = new AbortController().signal;

/** The message as tx-outbox's relay hands one to its publisher (the envelope needs a sequence). */
function toOutboxMessage(message: StoredTransactionalMessage): OutboxMessage {
  const metadata = message.metadata ?? {};
  return {
    id: message.id,
    eventId: message.id,
    aggregateType: message.aggregateType,
    aggregateId: message.aggregateId,
    sequence: Number(metadata['sequence'] ?? 0),
    type: message.messageType,
    schemaVersion: 1,
    topic: String(metadata['subject']),
    payload: Buffer.from(JSON.stringify(message.payload)),
    contentType: 'application/json',
    headers: {},
    createdAt: new Date(message.createdAt),
    attempts: 0,
  };
}

const handler: GeneralMessageHandler = {
  async handle(message) {
    const [outcome] = await publisher.publish([toOutboxMessage(message)], signal);
    if (outcome && !outcome.ok) throw outcome.error;
  },
};

const db = { connectionString: cfg.databaseUrl, application_name: cfg.applicationName };
const [shutdown] = initializeReplicationMessageListener(
  {
    outboxOrInbox: 'outbox',
    dbListenerConfig: db,
    settings: {
      dbSchema: cfg.schema,
      dbTable: cfg.table,
      dbPublication: cfg.publication,
      dbReplicationSlot: cfg.slot,
      enableMaxAttemptsProtection: false,
      enablePoisonousMessageProtection: false,
    },
  },
  handler,
  logger,
  {
    concurrencyStrategy: createReplicationSegmentMutexConcurrencyController(),
    messageProcessingTimeoutStrategy: () => 600_000,
  },
);

function peakRssMb(): number {
  const status = readFileSync('/proc/self/status', 'utf8');
  return Math.round(Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024);
}

process.stdout.write(`${JSON.stringify({ started: true })}\n`);
process.on('SIGTERM', async () => {
  await shutdown();
  await publisher.close();
  process.stdout.write(`${JSON.stringify({ peakRssMb: peakRssMb() })}\n`);
  process.exit(0);
});
