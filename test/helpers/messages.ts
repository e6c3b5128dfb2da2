import { randomUUID } from 'node:crypto';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';

let counter = 0;

/** Builds an OutboxMessage as the relay would hand it to a publisher. */
export function makeMessage(overrides: Partial<OutboxMessage> & { json?: unknown } = {}): OutboxMessage {
  counter += 1;
  const { json, ...rest } = overrides;
  return {
    id: String(counter),
    eventId: randomUUID(),
    aggregateType: 'order',
    aggregateId: `o-${counter}`,
    sequence: 1,
    type: 'order.created',
    schemaVersion: 1,
    topic: null,
    payload: Buffer.from(JSON.stringify(json ?? { n: counter })),
    contentType: 'application/json',
    headers: {},
    createdAt: new Date(),
    attempts: 0,
    ...rest,
  };
}

/** Publishes the messages as the relay would and fails unless the broker took every one. */
export async function publishAll(publisher: Publisher, messages: readonly OutboxMessage[]): Promise<void> {
  const outcomes = await publisher.publish(messages, new AbortController().signal);
  if (!outcomes.every((o) => o.ok)) throw new Error(`publish failed: ${JSON.stringify(outcomes)}`);
}
