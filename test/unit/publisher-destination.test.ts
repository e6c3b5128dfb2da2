/**
 * Every publisher refuses a `destination` that is not a function when it is created — not at
 * publish time, where every event would go dead ("destination is not a function") — naming the
 * option as it was spelled (the deprecated spellings too) and the fix. Nothing connects: the
 * options are checked before any connection is made.
 */
import { describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import type { Publisher } from '../../src/publishers/contract.js';
import { kafkaPublisher } from '../../src/publishers/kafka/index.js';
import { mqttPublisher } from '../../src/publishers/mqtt/index.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { rabbitmqPublisher } from '../../src/publishers/rabbitmq/index.js';
import { redisPublisher } from '../../src/publishers/redis/index.js';
import { webhookPublisher } from '../../src/publishers/webhook/index.js';

/** Each publisher with a `destination` (or its old spelling `old`) set to `value`; no broker is reached. */
const publishers: ReadonlyArray<{
  readonly name: string;
  readonly old: string;
  readonly create: (option: Record<string, unknown>) => Publisher;
}> = [
  { name: 'nats', old: 'subject', create: (o) => natsPublisher({ url: 'nats://127.0.0.1:1', ...o }) },
  { name: 'redis', old: 'stream', create: (o) => redisPublisher({ url: 'redis://127.0.0.1:1', ...o }) },
  { name: 'kafka', old: 'topic', create: (o) => kafkaPublisher({ url: ['127.0.0.1:1'], ...o }) },
  {
    name: 'rabbitmq',
    old: 'routingKey',
    create: (o) => rabbitmqPublisher({ url: 'amqp://127.0.0.1:1', ...o }),
  },
  { name: 'mqtt', old: 'topic', create: (o) => mqttPublisher({ url: 'mqtt://127.0.0.1:1', ...o }) },
];

function refusal(create: () => Publisher): OutboxValidationError {
  let publisher: Publisher | undefined;
  try {
    publisher = create();
  } catch (error) {
    if (error instanceof OutboxValidationError) return error;
    throw error;
  } finally {
    void publisher?.close();
  }
  throw new Error('the publisher was created: nothing refused');
}

describe('a destination that is not a function is refused when the publisher is created', () => {
  for (const { name, old, create } of publishers) {
    it(`${name}: destination and its deprecated spelling ${old}`, () => {
      for (const value of ['orders', 42, null, {}, ['orders']]) {
        const error = refusal(() => create({ destination: value }));
        expect(error.field).toBe('destination');
        expect(error.message).toMatch(
          /^destination: must be a function \(message\) => string, got (a string \("orders"\)|a number|null|an object|an array)\. Pass a function of the message, e.g. `destination: \(\) => .+` for one fixed destination, or leave it out for the publisher's default$/,
        );
      }
      const renamed = refusal(() => create({ [old]: 'orders' }));
      expect(renamed.field).toBe(old);
      expect(renamed.message).toContain(
        `${old}: must be a function (message) => string, got a string ("orders")`,
      );
      expect(renamed.message).toContain(`\`${old}: () => "orders"\``);
    });
  }

  it(`each takes a function, and none when left out`, async () => {
    for (const { create } of publishers) {
      await create({ destination: () => 'orders' }).close();
      await create({}).close();
    }
  });

  it('webhook: an `endpoints` that is neither a URL, a function nor a map is refused too', () => {
    for (const endpoints of [42, null, undefined]) {
      const error = refusal(() => webhookPublisher({ endpoints: endpoints as never, secret: 'k' }));
      expect(error.field).toBe('endpoints');
    }
  });
});
