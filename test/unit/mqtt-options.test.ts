import type { MqttClient } from 'mqtt';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import type { OutboxMessage } from '../../src/publishers/contract.js';
import {
  DEFAULT_MAX_IN_FLIGHT,
  DEFAULT_TIMEOUT_MS,
  type MqttPublisherOptions,
  resolveMqttOptions,
} from '../../src/publishers/mqtt/options.js';
import { defaultTopic } from '../../src/publishers/mqtt/topic.js';

const URL = 'mqtt://127.0.0.1:1883';

/** Just what option resolution reads of a client: its protocol version. */
function fakeClient(protocolVersion?: 3 | 4 | 5): MqttClient {
  return { options: { protocolVersion } } as unknown as MqttClient;
}

function fieldOf(options: MqttPublisherOptions): string | undefined {
  try {
    resolveMqttOptions(options);
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxValidationError);
    return (error as OutboxValidationError).field;
  }
  return undefined;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('MQTT publisher options', () => {
  it('fills in the defaults, once, into a frozen object', () => {
    const resolved = resolveMqttOptions({ url: URL });
    expect(Object.isFrozen(resolved)).toBe(true);
    expect(resolved).toEqual({
      url: URL,
      client: undefined,
      clientOptions: {},
      destination: defaultTopic,
      qos: 1,
      protocolVersion: 5,
      source: 'tx-outbox',
      timeoutMs: DEFAULT_TIMEOUT_MS,
      maxInFlight: DEFAULT_MAX_IN_FLIGHT,
    });
    expect(DEFAULT_TIMEOUT_MS).toBe(10_000);
    expect(DEFAULT_MAX_IN_FLIGHT).toBe(1024);
  });

  it('keeps what is given', () => {
    const given: MqttPublisherOptions = {
      clientOptions: { clientId: 'me' },
      destination: (m) => `x/${m.aggregateId}`,
      qos: 2,
      protocolVersion: 4,
      timeoutMs: 500,
      maxInFlight: 65_535,
    };
    expect(resolveMqttOptions({ url: URL, ...given, ceSource: 'urn:example:orders/a%20b?x=1' })).toEqual({
      url: URL,
      client: undefined,
      ...given,
      source: 'urn:example:orders/a%20b?x=1',
    });
  });

  it("takes a given client's protocol version: 5 stays 5, anything else is 3.1.1", () => {
    expect(resolveMqttOptions({ client: fakeClient(5) })).toMatchObject({
      protocolVersion: 5,
      url: undefined,
    });
    expect(resolveMqttOptions({ client: fakeClient(4) }).protocolVersion).toBe(4);
    expect(resolveMqttOptions({ client: fakeClient() }).protocolVersion).toBe(4);
  });

  it('names the invalid option', () => {
    const client = fakeClient(5);
    const cases: Array<[MqttPublisherOptions, string]> = [
      [{}, 'url'],
      [{ url: '' }, 'url'],
      [{ url: '127.0.0.1:1883 ' }, 'url'],
      [{ url: URL, client }, 'client'],
      [{ client, clientOptions: {} }, 'clientOptions'],
      [{ url: URL, qos: 0 as 1 }, 'qos'],
      [{ url: URL, protocolVersion: 3 as 4 }, 'protocolVersion'],
      [{ client, protocolVersion: 4 }, 'protocolVersion'],
      [{ url: URL, destination: 'orders' as unknown as () => string }, 'destination'],
      [{ url: URL, ceSource: '' }, 'ceSource'],
      [{ url: URL, ceSource: 'orders service' }, 'ceSource'],
      [{ url: URL, ceSource: 'ördérs' }, 'ceSource'],
      [{ url: URL, ceSource: '1x:orders' }, 'ceSource'],
      [{ url: URL, ceSource: 7 as unknown as string }, 'ceSource'],
      [{ url: URL, timeoutMs: 1.5 }, 'timeoutMs'],
      [{ url: URL, timeoutMs: 0 }, 'timeoutMs'],
      [{ url: URL, maxInFlight: 0 }, 'maxInFlight'],
      [{ url: URL, maxInFlight: 70_000 }, 'maxInFlight'],
    ];
    for (const [options, field] of cases) expect(fieldOf(options)).toBe(field);
  });

  it('says what to do', () => {
    expect(() => resolveMqttOptions({})).toThrow(
      /Give `url` \(e\.g\. mqtt:\/\/127\.0\.0\.1:1883\) or a `client`/,
    );
    expect(() => resolveMqttOptions({ url: URL, maxInFlight: 70_000 })).toThrow(
      /must be at most 65535 \(MQTT packet identifiers\), got 70000/,
    );
    expect(() => resolveMqttOptions({ url: URL, qos: 0 as 1 })).toThrow(/QoS 0 has no acknowledgement/);
    expect(() => resolveMqttOptions({ url: URL, ceSource: 'orders service' })).toThrow(
      /the CloudEvents source is a URI-reference.*'urn:example:orders'/,
    );
  });

  it('still takes the old spelling `topic`, warning once; an invalid one is reported under its own name', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const topic = (m: OutboxMessage): string => `old/${m.aggregateId}`;
    expect(resolveMqttOptions({ url: URL, topic }).destination).toBe(topic);
    expect(resolveMqttOptions({ url: URL, topic }).destination).toBe(topic);
    const deprecations = warn.mock.calls.filter(([message]) => String(message).includes('`topic`'));
    expect(deprecations).toHaveLength(1);
    expect(String(deprecations[0]![0])).toMatch(
      /mqttPublisher: option `topic` is deprecated, use `destination`/,
    );
    expect(fieldOf({ url: URL, topic: 'orders' as unknown as () => string })).toBe('topic');
    expect(fieldOf({ url: URL, topic, destination: topic })).toBe('topic');
    warn.mockRestore();
  });

  it('still takes the old spelling `source` as `ceSource`, warning once, named as spelled', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      expect(resolveMqttOptions({ url: URL, source: '/orders' }).source).toBe('/orders');
      expect(String(warn.mock.calls[0]?.[0])).toMatch(
        /mqttPublisher: option `source` is deprecated, use `ceSource`/,
      );
      expect(fieldOf({ url: URL, source: 'orders service' })).toBe('source');
    } finally {
      warn.mockRestore();
    }
  });
});
