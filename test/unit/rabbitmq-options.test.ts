import { afterEach, describe, expect, it, vi } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import type { AmqpConnection } from '../../src/publishers/rabbitmq/link.js';
import {
  type RabbitMqPublisherOptions,
  resolveRabbitMqOptions,
} from '../../src/publishers/rabbitmq/options.js';
import { defaultRoutingKey } from '../../src/publishers/rabbitmq/wire.js';

const URL = 'amqp://guest:guest@127.0.0.1:5672';
/** Enough of an amqplib connection for option checks (no broker). */
const fakeClient = { createConfirmChannel: () => Promise.resolve() } as unknown as AmqpConnection;

function refusal(options: RabbitMqPublisherOptions): OutboxValidationError {
  try {
    resolveRabbitMqOptions(options);
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxValidationError);
    return error as OutboxValidationError;
  }
  throw new Error(`accepted ${JSON.stringify(options)}`);
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('resolveRabbitMqOptions', () => {
  it('fills in the defaults and freezes the result', () => {
    const o = resolveRabbitMqOptions({ url: URL });
    expect(o).toMatchObject({
      url: URL,
      client: undefined,
      exchange: 'tx-outbox',
      assertExchange: false,
      source: 'tx-outbox',
      timeoutMs: 10_000,
      maxInFlight: 1024,
      maxMessageBytes: Number.POSITIVE_INFINITY,
    });
    expect(o.destination).toBe(defaultRoutingKey);
    expect(Object.isFrozen(o)).toBe(true);
  });

  it('keeps what is given', () => {
    const destination = (): string => 'rk';
    const exchange = (): string => 'ex';
    const given: RabbitMqPublisherOptions = {
      client: fakeClient,
      clientOptions: { noDelay: true },
      exchange,
      destination,
      assertExchange: true,
      timeoutMs: 500,
      maxInFlight: 8,
      maxMessageBytes: 1_000,
    };
    const o = resolveRabbitMqOptions({ ...given, ceSource: 'orders' });
    expect(o).toEqual({ url: undefined, ...given, source: 'orders' });
    expect(o).not.toBe(given);
  });

  it('names the field and the fix of a bad option', () => {
    expect(refusal({}).field).toBe('url');
    expect(refusal({ url: '' }).field).toBe('url');
    expect(refusal({ url: URL, client: fakeClient }).field).toBe('client');
    expect(refusal({ client: {} as AmqpConnection }).field).toBe('client');
    expect(refusal({ url: URL, exchange: 1 as unknown as string }).field).toBe('exchange');
    expect(refusal({ url: URL, exchange: 'é'.repeat(128) }).field).toBe('exchange'); // 256 bytes
    expect(refusal({ url: URL, exchange: '', assertExchange: true }).field).toBe('assertExchange');
    expect(refusal({ url: URL, destination: 'rk' as unknown as () => string }).field).toBe('destination');
    expect(refusal({ url: URL, timeoutMs: 0 }).field).toBe('timeoutMs');
    expect(refusal({ url: URL, maxInFlight: 1.5 }).field).toBe('maxInFlight');
    expect(refusal({ url: URL, maxMessageBytes: -1 }).field).toBe('maxMessageBytes');
    expect(resolveRabbitMqOptions({ url: URL, exchange: 'x'.repeat(255) }).exchange).toHaveLength(255);
  });

  it('takes a source that is a CloudEvents URI-reference RabbitMQ hands on as an AMQP 1.0 string', () => {
    for (const ok of [
      'https://orders.example.com',
      'urn:example:orders',
      '/orders',
      `urn:${'s'.repeat(251)}`,
    ]) {
      expect(resolveRabbitMqOptions({ url: URL, ceSource: ok }).source).toBe(ok);
    }
    for (const bad of ['', 'has space', 'café', '1bad:scheme', 7 as unknown as string]) {
      expect(refusal({ url: URL, ceSource: bad }).field).toBe('ceSource');
    }
    const long = refusal({ url: URL, ceSource: `urn:${'s'.repeat(252)}` });
    expect(long.field).toBe('ceSource');
    expect(long.message).toContain('256 characters long');
    expect(long.message).toContain('AMQP 1.0 consumers as binary');
  });

  it('refuses a URL of another scheme without echoing its password', () => {
    const error = refusal({ url: 'http://user:s3cret@127.0.0.1:5672' });
    expect(error.field).toBe('url');
    expect(error.message).toContain('must start with amqp:// or amqps://');
    expect(error.message).not.toContain('s3cret');
    expect(resolveRabbitMqOptions({ url: 'AMQPS://h' }).url).toBe('AMQPS://h');
    expect(resolveRabbitMqOptions({ url: { hostname: 'h' } }).url).toEqual({ hostname: 'h' });
  });

  it('reads the old spellings as the new names, warning once per spelling', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const routingKey = (): string => 'rk';
    const old = { connection: fakeClient, socketOptions: { noDelay: true }, routingKey, source: '/orders' };
    const o = resolveRabbitMqOptions(old);
    resolveRabbitMqOptions(old);
    expect(o.client).toBe(fakeClient);
    expect(o.clientOptions).toEqual({ noDelay: true });
    expect(o.destination).toBe(routingKey);
    expect(o.source).toBe('/orders');
    const messages = warn.mock.calls.map(([message]) => String(message));
    expect(messages).toHaveLength(4);
    expect(messages.filter((m) => m.includes('`source` is deprecated, use `ceSource`'))).toHaveLength(1);
    expect(messages.filter((m) => m.includes('`connection`') && m.includes('`client`'))).toHaveLength(1);
    expect(messages.filter((m) => m.includes('`socketOptions`'))).toHaveLength(1);
    expect(messages.filter((m) => m.includes('`routingKey`'))).toHaveLength(1);
  });

  it('refuses an old and a new spelling of the same option together', () => {
    vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const both = { url: URL, destination: () => 'a', routingKey: () => 'b' };
    expect(refusal(both).field).toBe('routingKey');
    expect(refusal({ client: fakeClient, connection: fakeClient }).field).toBe('connection');
  });
});
