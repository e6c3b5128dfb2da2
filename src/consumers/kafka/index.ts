/**
 * Apache Kafka consumer adapter, on @platformatic/kafka: a consumer group member reading one
 * topic (from the earliest offset when the group has none committed) whose records go through
 * the inbox. Each record is read from its CloudEvents headers (the Kafka binding's `ce_*` and
 * `content-type`, or the `ce-*` headers tx-outbox 0.1 wrote), handled through a KeyedQueue keyed
 * by aggregate (bounded concurrency, never two records of one aggregate at once), and its offset
 * becomes committable only after `inbox.handle` resolved. Per partition, the adapter commits only
 * the offset below which every record was handled, so a restart redelivers whatever was not.
 * A `deferred` record is handled again in process after `deferMs` (doubling with each deferral
 * in a row, up to `deferCapMs`) until the inbox answers
 * otherwise (its offset stays uncommitted meanwhile). A record without a tx-outbox envelope cannot
 * be deduplicated nor quarantined: it is logged and counted as handled.
 *
 * Rebalances: when the group starts rebalancing, the handled prefixes are committed (best effort),
 * and again when this member joins the new generation. A partition it keeps keeps its
 * bookkeeping: the stream re-reads it from the committed offset and what was received already is
 * skipped (offsets only grow), so the handled prefix stays in arrival order. A partition it lost
 * is forgotten: its records still being handled commit nothing and its deferred records are
 * abandoned (the new owner reads them again). A partition it gained starts where the stream
 * says after the join (its 'offsets' event); records of it fetched before are skipped. A record
 * of a partition not assigned to this member is never handled nor committed, and commit points
 * never move backwards (the client library itself may resend a commit after rejoining the group:
 * at worst a redelivery, which the inbox answers `duplicate`).
 */

import { Consumer as KafkaClient } from '@platformatic/kafka';
import type { PoolClient } from 'pg';
import type { Consumer } from '../consumer.js';
import { KafkaConsumer, type KafkaStream } from './consumer.js';
import { type KafkaConsumerOptions, resolveKafkaConsumerOptions } from './options.js';

export type { Consumer } from '../consumer.js';
export type { KafkaConsumerOptions } from './options.js';

/**
 * Consumes a Kafka topic through the inbox.
 *
 * @example
 * const consumer = await consumeKafka({ inbox, handler, url: '127.0.0.1:9092', topic: 'order.created', group: 'inventory' });
 * // …
 * await consumer.stop();
 */
export async function consumeKafka<T = unknown, Tx = PoolClient>(
  options: KafkaConsumerOptions<T, Tx>,
): Promise<Consumer> {
  const o = resolveKafkaConsumerOptions(options);
  const client = new KafkaClient<Buffer, Buffer, Buffer, Buffer>({
    clientId: o.clientId,
    groupId: o.group,
    bootstrapBrokers: [...o.url],
    autocommit: false,
    sessionTimeout: o.sessionTimeoutMs,
    heartbeatInterval: o.heartbeatIntervalMs,
    rebalanceTimeout: o.rebalanceTimeoutMs,
  });
  try {
    const open = (): Promise<KafkaStream> =>
      client.consume({
        topics: [o.topic],
        mode: 'committed',
        fallbackMode: 'earliest',
        autocommit: false,
      });
    const adapter = new KafkaConsumer(client, await open(), open, o);
    adapter.start();
    return adapter;
  } catch (error) {
    await client.close().catch(() => undefined);
    throw error;
  }
}
