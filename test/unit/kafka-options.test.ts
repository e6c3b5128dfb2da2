/** The Kafka publisher's option resolution, with no broker: names, checks, defaults, old spellings. */
import { describe, expect, it, vi } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { defaultTopic, type KafkaProducer, kafkaPublisher } from '../../src/publishers/kafka/index.js';
import { resolveKafkaOptions } from '../../src/publishers/kafka/options.js';

const producer = {} as KafkaProducer;

function problem(run: () => unknown): OutboxValidationError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxValidationError);
    return error as OutboxValidationError;
  }
  throw new Error('expected an OutboxValidationError');
}

describe('resolveKafkaOptions', () => {
  it('old spellings (brokers, producer, topic) still work, with one DeprecationWarning each', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const destination = () => 'orders';
      const given = { brokers: ['127.0.0.1:9092'], topic: destination };
      const settings = resolveKafkaOptions(given);
      expect(settings.url).toEqual(['127.0.0.1:9092']);
      expect(settings.destination).toBe(destination);
      expect(given).toEqual({ brokers: ['127.0.0.1:9092'], topic: destination });
      resolveKafkaOptions(given);
      expect(resolveKafkaOptions({ producer }).client).toBe(producer);
      resolveKafkaOptions({ producer });
      const messages = warn.mock.calls.map((call) => String(call[0]));
      expect(messages).toHaveLength(3);
      expect(messages).toEqual([
        expect.stringMatching(/kafkaPublisher: option `brokers` is deprecated, use `url`/),
        expect.stringMatching(/`topic` is deprecated, use `destination`/),
        expect.stringMatching(/`producer` is deprecated, use `client`/),
      ]);
      // The publisher itself takes them (the producer connects lazily: nothing is dialled here).
      const publisher = kafkaPublisher({ brokers: ['127.0.0.1:1'] });
      expect(publisher.name).toBe('kafka');
      return publisher.close();
    } finally {
      warn.mockRestore();
    }
  });

  it('refuses an old and a new spelling together', () => {
    const error = problem(() => resolveKafkaOptions({ brokers: ['a:1'], url: ['b:2'] }));
    expect(error.field).toBe('brokers');
    expect(error.message).toMatch(/deprecated spelling of `url`/);
  });

  it('takes one host:port as a list of one, as consumeKafka does', () => {
    expect(resolveKafkaOptions({ url: '127.0.0.1:9092' }).url).toEqual(['127.0.0.1:9092']);
    expect(() => resolveKafkaOptions({ url: 'not a broker' })).toThrow(/^url/);
  });

  it('fills in the defaults, into a frozen object', () => {
    const settings = resolveKafkaOptions({ url: ['127.0.0.1:9092'] });
    expect(settings).toEqual({
      url: ['127.0.0.1:9092'],
      client: undefined,
      clientId: 'tx-outbox',
      clientOptions: undefined,
      timeoutMs: 10_000,
      destination: defaultTopic,
      source: 'tx-outbox',
      createTopics: false,
      idempotent: true,
      maxMessageBytes: 1_048_576,
      mapBrokerAddress: undefined,
    });
    expect(Object.isFrozen(settings)).toBe(true);
    expect(Object.isFrozen(settings.url)).toBe(true);
  });

  it('keeps what is given; createTopics true means the broker defaults', () => {
    const given = {
      url: ['[::1]:9092', 'kafka-1.internal:19092'],
      clientId: 'relay',
      timeoutMs: 500,
      ceSource: 'orders',
      idempotent: false,
      maxMessageBytes: 2_000_000,
      mapBrokerAddress: () => ({ host: 'h', port: 1 }),
    };
    const { ceSource, ...kept } = given;
    expect(resolveKafkaOptions({ ...given, createTopics: true })).toMatchObject({
      ...kept,
      source: ceSource,
      createTopics: {},
    });
    expect(resolveKafkaOptions({ url: ['h:1'], createTopics: { partitions: 3 } }).createTopics).toEqual({
      partitions: 3,
    });
    expect(resolveKafkaOptions({ url: ['h:1'], createTopics: false }).createTopics).toBe(false);
    expect(resolveKafkaOptions({ client: producer }).url).toEqual([]);
  });

  it('names the field and the fix of a bad option', () => {
    expect(problem(() => resolveKafkaOptions({})).message).toBe(
      'url: is missing. Give `url` (host:port list) or a `client`',
    );
    expect(problem(() => resolveKafkaOptions({ url: [] })).field).toBe('url');
    expect(problem(() => resolveKafkaOptions({ url: ['h:1'], client: producer })).message).toBe(
      'client: was given together with `url`. Give only one of them',
    );
    expect(problem(() => resolveKafkaOptions({ url: ['localhost'] })).message).toBe(
      'url: has an entry that is not host:port: "localhost". Write each broker as host:port, e.g. 127.0.0.1:9092',
    );
    expect(problem(() => resolveKafkaOptions({ url: ['h :1'] })).field).toBe('url');
    expect(problem(() => resolveKafkaOptions({ url: ['h:123456'] })).field).toBe('url');
    expect(problem(() => resolveKafkaOptions({ client: producer, createTopics: true })).message).toMatch(
      /^createTopics: needs `url`/,
    );
    expect(problem(() => resolveKafkaOptions({ url: ['h:1'], timeoutMs: 0 })).field).toBe('timeoutMs');
    expect(problem(() => resolveKafkaOptions({ url: ['h:1'], maxMessageBytes: 1.5 })).field).toBe(
      'maxMessageBytes',
    );
    expect(problem(() => resolveKafkaOptions({ url: ['h:1'], createTopics: { partitions: 0 } })).field).toBe(
      'createTopics.partitions',
    );
    expect(
      problem(() => resolveKafkaOptions({ url: ['h:1'], createTopics: { replicationFactor: -1 } })).field,
    ).toBe('createTopics.replicationFactor');
  });

  it('takes a URI-reference as ceSource and refuses one a CloudEvents SDK would not read', () => {
    for (const ceSource of ['urn:example:orders', 'https://orders.example.com/a%20b', '/orders']) {
      expect(resolveKafkaOptions({ url: ['h:1'], ceSource }).source).toBe(ceSource);
    }
    const spaced = problem(() => resolveKafkaOptions({ url: ['h:1'], ceSource: 'order service' }));
    expect(spaced.field).toBe('ceSource');
    expect(spaced.message).toMatch(/^ceSource: has " " at index 5/);
    expect(problem(() => resolveKafkaOptions({ url: ['h:1'], ceSource: '' })).field).toBe('ceSource');
    expect(problem(() => kafkaPublisher({ url: ['h:1'], ceSource: 'café' })).field).toBe('ceSource');
  });

  it('reads the deprecated `source` as `ceSource`, warning once, naming it as spelled, and refuses both', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      expect(resolveKafkaOptions({ url: ['h:1'], source: 'urn:example:orders' }).source).toBe(
        'urn:example:orders',
      );
      expect(problem(() => resolveKafkaOptions({ url: ['h:1'], source: 'order service' })).field).toBe(
        'source',
      );
      expect(warn.mock.calls.map(([text]) => String(text).split(' (')[0])).toEqual([
        'kafkaPublisher: option `source` is deprecated, use `ceSource`',
      ]);
      expect(
        problem(() => resolveKafkaOptions({ url: ['h:1'], source: '/a', ceSource: '/b' })).message,
      ).toMatch(/^source: is the deprecated spelling of `ceSource`, which is given too/);
    } finally {
      warn.mockRestore();
    }
  });
});
