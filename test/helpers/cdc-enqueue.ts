/** `enqueue` in table or WAL mode, for the CDC relay's tests. */
import type { PoolClient } from 'pg';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';

export type Via = 'table' | 'wal';

export async function enqueueVia(
  tx: PoolClient,
  events: readonly OutboxEvent[],
  schema: string,
  via: Via,
): Promise<void> {
  await enqueue(tx, events, { schema, via });
}
