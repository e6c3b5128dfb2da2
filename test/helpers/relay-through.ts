import { expect } from 'vitest';
import { enqueue } from '../../src/producer/enqueue.js';
import type { OutboxEvent } from '../../src/producer/event.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { inTransaction, type TestDb, waitFor } from './db.js';

/** Enqueues the events, runs a relay with `publisher` until each is published (none dead), stops it. */
export async function relayThrough(db: TestDb, publisher: Publisher, events: OutboxEvent[]): Promise<void> {
  await inTransaction(db.pool, (tx) => enqueue(tx, events, { schema: db.schema }));
  const relay = createRelay({
    pool: db.pool,
    publisher,
    schema: db.schema,
    pollIntervalMs: 50,
    maxAttempts: 1,
  });
  await relay.start();
  try {
    await waitFor(async () => relay.stats().published + relay.stats().dead >= events.length, {
      what: 'every event published',
      timeoutMs: 15_000,
    });
    expect(relay.stats()).toMatchObject({ published: events.length, dead: 0 });
  } finally {
    await relay.stop({ timeout: 2000 }); // closes the publisher too
  }
}
