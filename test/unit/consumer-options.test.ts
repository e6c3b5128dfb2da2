import { afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { resolveKafkaConsumerOptions } from '../../src/consumers/kafka/options.js';
import { resolveMqttConsumerOptions } from '../../src/consumers/mqtt-options.js';
import { resolveNatsConsumerOptions } from '../../src/consumers/nats-options.js';
import { resolveRabbitMqConsumerOptions } from '../../src/consumers/rabbitmq-options.js';
import { resolveRedisConsumerOptions } from '../../src/consumers/redis-options.js';
import {
  resolveWebhookReceiverOptions,
  resolveWebhookServerOptions,
} from '../../src/consumers/webhook-options.js';
import { OutboxValidationError } from '../../src/errors.js';
import type { Inbox } from '../../src/inbox/inbox.js';
import { silentLogger } from '../../src/logger.js';

const inbox = { handle: async () => ({ status: 'processed' }) } as unknown as Inbox;
const handler = async () => undefined;
const base = { inbox, handler };
const fake = <T>() => ({}) as T;

let warn: MockInstance<typeof process.emitWarning>;
beforeEach(() => {
  warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
});
afterEach(() => warn.mockRestore());

const warnings = () => warn.mock.calls.map((c) => String(c[0]));

function invalid(fn: () => unknown, field: string, text?: RegExp): void {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe(field);
    if (text) expect((error as Error).message).toMatch(text);
    return;
  }
  throw new Error(`expected an OutboxValidationError on ${field}`);
}

describe('consumeNats options', () => {
  const nats = { ...base, stream: 'S', durable: 'd' };

  it('resolves once into a frozen object with the defaults', () => {
    const o = resolveNatsConsumerOptions({ ...nats, url: 'nats://h:4222' });
    expect(Object.isFrozen(o)).toBe(true);
    expect(o.client).toBeUndefined();
    expect(o).toMatchObject({
      url: 'nats://h:4222',
      concurrency: 16,
      ackWaitMs: 30_000,
      defer: { deferMs: 1000, deferCapMs: 10_000 },
      logger: silentLogger,
    });
    expect(warnings()).toEqual([]);
  });

  it('accepts servers, connection and connectionOptions, warning once per spelling', () => {
    const o = resolveNatsConsumerOptions({
      ...nats,
      servers: ['nats://a', 'nats://b'],
      connectionOptions: { name: 'x' },
    });
    expect(o.url).toEqual(['nats://a', 'nats://b']);
    expect(o.clientOptions).toEqual({ name: 'x' });
    resolveNatsConsumerOptions({ ...nats, servers: 'nats://a' });
    expect(warnings()).toEqual([
      expect.stringMatching(/consumeNats: option `servers` is deprecated, use `url`/),
      expect.stringMatching(/consumeNats: option `connectionOptions` is deprecated, use `clientOptions`/),
    ]);
    const client = fake<never>();
    expect(resolveNatsConsumerOptions({ ...nats, connection: client }).client).toBe(client);
  });

  it('names the field and the fix', () => {
    invalid(() => resolveNatsConsumerOptions({ ...nats }), 'url', /or client is required \(exactly one\)/);
    invalid(() => resolveNatsConsumerOptions({ ...nats, url: [] }), 'url');
    invalid(() => resolveNatsConsumerOptions({ ...nats, url: 'nats://a', servers: 'nats://b' }), 'servers');
    invalid(() => resolveNatsConsumerOptions({ ...nats, url: 'n', durable: '' }), 'durable', /is missing/);
    invalid(() => resolveNatsConsumerOptions({ ...nats, url: 'n', ackWaitMs: 0 }), 'ackWaitMs');
    invalid(() => resolveNatsConsumerOptions({ ...nats, url: 'n', inbox: undefined as never }), 'inbox');
  });
});

describe('consumeKafka options', () => {
  const kafka = { ...base, topic: 't' };

  it('resolves url (one or several) and group, with the defaults', () => {
    const o = resolveKafkaConsumerOptions({ ...kafka, url: 'h:9092', group: 'g' });
    expect(Object.isFrozen(o)).toBe(true);
    expect(o).toMatchObject({
      url: ['h:9092'],
      group: 'g',
      clientId: 'tx-outbox',
      maxDeferred: 1000,
      sessionTimeoutMs: 30_000,
      heartbeatIntervalMs: 5000,
      rebalanceTimeoutMs: 60_000,
    });
    expect(resolveKafkaConsumerOptions({ ...kafka, url: ['a:1', 'b:2'], group: 'g' }).url).toEqual([
      'a:1',
      'b:2',
    ]);
    expect(warnings()).toEqual([]);
  });

  it('accepts brokers and groupId, warning once per spelling', () => {
    const o = resolveKafkaConsumerOptions({ ...kafka, brokers: ['a:1'], groupId: 'g' });
    expect(o).toMatchObject({ url: ['a:1'], group: 'g' });
    resolveKafkaConsumerOptions({ ...kafka, brokers: ['a:1'], groupId: 'g' });
    expect(warnings()).toEqual([
      expect.stringMatching(/consumeKafka: option `brokers` is deprecated, use `url`/),
      expect.stringMatching(/consumeKafka: option `groupId` is deprecated, use `group`/),
    ]);
  });

  it('names the field and the fix', () => {
    invalid(
      () => resolveKafkaConsumerOptions({ ...kafka, group: 'g' }),
      'url',
      /Give at least one host:port/,
    );
    invalid(() => resolveKafkaConsumerOptions({ ...kafka, url: [], group: 'g' }), 'url');
    invalid(() => resolveKafkaConsumerOptions({ ...kafka, url: '', group: 'g' }), 'url');
    invalid(() => resolveKafkaConsumerOptions({ ...kafka, url: 'a:1' }), 'group', /is missing/);
    invalid(() => resolveKafkaConsumerOptions({ ...kafka, url: 'a:1', group: 'g', groupId: 'h' }), 'groupId');
    invalid(
      () => resolveKafkaConsumerOptions({ ...kafka, url: 'a:1', group: 'g', heartbeatIntervalMs: 30_000 }),
      'heartbeatIntervalMs',
      /not below sessionTimeoutMs \(30000\)/,
    );
  });
});

describe('consumeRabbitMq options', () => {
  const rabbit = { ...base, queue: 'q' };

  it('resolves with the defaults', () => {
    const o = resolveRabbitMqConsumerOptions({ ...rabbit, url: 'amqp://h' });
    expect(Object.isFrozen(o)).toBe(true);
    expect(o).toMatchObject({ url: 'amqp://h', prefetch: 32, concurrency: 16, deferMs: 1000 });
  });

  it('accepts connection and socketOptions, warning once per spelling', () => {
    const client = fake<never>();
    const o = resolveRabbitMqConsumerOptions({
      ...rabbit,
      connection: client,
      socketOptions: { timeout: 5 },
    });
    expect(o.client).toBe(client);
    expect(o.clientOptions).toEqual({ timeout: 5 });
    resolveRabbitMqConsumerOptions({ ...rabbit, connection: client });
    expect(warnings()).toEqual([
      expect.stringMatching(/consumeRabbitMq: option `connection` is deprecated, use `client`/),
      expect.stringMatching(/consumeRabbitMq: option `socketOptions` is deprecated, use `clientOptions`/),
    ]);
  });

  it('names the field and the fix', () => {
    invalid(() => resolveRabbitMqConsumerOptions({ ...rabbit }), 'url', /or client is required/);
    invalid(() => resolveRabbitMqConsumerOptions({ ...rabbit, url: 'amqp://h', prefetch: 0 }), 'prefetch');
    invalid(() => resolveRabbitMqConsumerOptions({ ...rabbit, url: 'amqp://h', queue: '' }), 'queue');
  });
});

describe('consumeRedis, consumeMqtt, webhookReceiver options', () => {
  it('redis: defaults, the claim interval from the idle time', () => {
    const o = resolveRedisConsumerOptions({
      ...base,
      url: 'redis://h',
      stream: 's',
      group: 'g',
      consumerName: 'c',
    });
    expect(Object.isFrozen(o)).toBe(true);
    expect(o).toMatchObject({ startId: '0', blockMs: 1000, claimIdleMs: 30_000, claimIntervalMs: 15_000 });
    const small = resolveRedisConsumerOptions({
      ...base,
      url: 'redis://h',
      stream: 's',
      group: 'g',
      consumerName: 'c',
      claimIdleMs: 150,
    });
    expect(small.claimIntervalMs).toBe(100);
    invalid(
      () => resolveRedisConsumerOptions({ ...base, stream: 's', group: 'g', consumerName: 'c' }),
      'url',
    );
  });

  it('mqtt: defaults; a url that does not parse names the fix', () => {
    const o = resolveMqttConsumerOptions({ ...base, url: 'mqtt://h:1883', topic: 't/#', clientId: 'c' });
    expect(Object.isFrozen(o)).toBe(true);
    expect(o).toMatchObject({ sessionExpirySeconds: 86_400, defer: { deferMs: 1000, deferCapMs: 10_000 } });
    invalid(
      () => resolveMqttConsumerOptions({ ...base, url: 'not a url', topic: 't', clientId: 'c' }),
      'url',
      /Give e\.g\. mqtt:\/\/127\.0\.0\.1:1883/,
    );
    invalid(
      () => resolveMqttConsumerOptions({ ...base, url: 'mqtt://h', topic: 't', clientId: 'c', deferMs: -1 }),
      'deferMs',
      /Use a non-negative integer/,
    );
  });

  it('webhook: defaults, the secret checked at once, the server timeouts consistent', () => {
    const secret = `whsec_${Buffer.from('0123456789abcdef0123456789abcdef').toString('base64')}`;
    const o = resolveWebhookReceiverOptions({ ...base, secret });
    expect(Object.isFrozen(o)).toBe(true);
    expect(o).toMatchObject({
      toleranceSeconds: 300,
      concurrency: 16,
      retryAfter: '1',
      maxBodyBytes: 1024 * 1024,
      bodyTimeoutMs: 10_000,
    });
    invalid(() => resolveWebhookReceiverOptions({ ...base, secret: '' }), 'secret', /is missing/);
    invalid(
      () => resolveWebhookReceiverOptions({ ...base, secret, retryAfterSeconds: -1 }),
      'retryAfterSeconds',
    );
    expect(resolveWebhookReceiverOptions({ ...base, secret, retryAfterSeconds: 0 }).retryAfter).toBe('0');
    expect(resolveWebhookServerOptions({ ...base, secret, headersTimeoutMs: 40_000 })).toMatchObject({
      host: '127.0.0.1',
      port: 0,
      headersTimeoutMs: 40_000,
      requestTimeoutMs: 40_000,
    });
    invalid(
      () => resolveWebhookServerOptions({ ...base, secret, headersTimeoutMs: 5000, requestTimeoutMs: 1000 }),
      'headersTimeoutMs',
      /more than requestTimeoutMs/,
    );
  });
});
