import { connectAsync, type MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import {
  BROKER_UNAVAILABLE,
  isBrokerUnavailable,
  OutboxError,
  OutboxValidationError,
  PublishError,
} from '../../src/errors.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import { type MqttPublisherOptions, mqttPublisher } from '../../src/publishers/mqtt/index.js';
import { TcpProxy } from '../../src/testing/index.js';
import { makeMessage } from '../helpers/messages.js';
import { MQTT_BROKER, MQTT_BROKER_URL, MqttTap, userProperties } from '../helpers/mqtt.js';
import { connack5, FakeBroker } from '../helpers/mqtt-fakes.js';

// The publisher contract runs in test/contract/mqtt.contract.test.ts; this file is MQTT's own behaviour.
const BROKER = MQTT_BROKER;
const URL = MQTT_BROKER_URL;
/** Everything the file's subscriber received, per namespace (the topic level after PREFIX). */
const tap = new MqttTap(URL);
const PREFIX = tap.prefix;
const received = tap.received;
let subscriber: MqttClient;
const publishers: Publisher[] = [];
const clients: MqttClient[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => {
  unhandled.push(reason);
};

beforeAll(async () => {
  process.on('unhandledRejection', onUnhandled);
  subscriber = await tap.start();
});

afterAll(async () => {
  await Promise.allSettled(publishers.map((p) => p.close()));
  await Promise.allSettled(clients.map((c) => c.endAsync(true)));
  await tap.close();
  process.off('unhandledRejection', onUnhandled);
  expect(unhandled).toEqual([]);
});

const listen = (ns: string): Promise<void> => tap.listen(ns);
const arrived = (ns: string, expected: number, graceMs?: number) => tap.arrived(ns, expected, graceMs);

function publisher(options: MqttPublisherOptions): Publisher {
  const created = mqttPublisher(options);
  publishers.push(created);
  return created;
}

function never(): AbortSignal {
  return new AbortController().signal;
}

function expectFailure(outcome: PublishOutcome | undefined, retryable: boolean): PublishError {
  expect(outcome?.ok).toBe(false);
  if (outcome === undefined || outcome.ok) throw new Error('expected a failed outcome');
  expect(outcome.retryable).toBe(retryable);
  expect(outcome.error).toBeInstanceOf(PublishError);
  return outcome.error as PublishError;
}

let nsCounter = 0;
function namespace(): string {
  nsCounter += 1;
  return `t${nsCounter}`;
}

// --- MQTT-specific behaviour -------------------------------------------------------------------

describe('mqttPublisher on Mosquitto', () => {
  it('awaits the PUBACK: outcomes stay open while the broker already delivered, until the acks pass', async () => {
    const ns = namespace();
    await listen(ns);
    const proxy = await TcpProxy.start(BROKER);
    try {
      const pub = publisher({ url: `mqtt://127.0.0.1:${proxy.port}`, timeoutMs: 5000 });
      const topic = `${PREFIX}/${ns}/acks`;
      expect(await pub.publish([makeMessage({ topic })], never())).toEqual([{ ok: true }]);

      proxy.stall({ only: 'downstream' }); // the broker's answers (PUBACKs) wait in the proxy
      const batch = Array.from({ length: 10 }, (_, i) => makeMessage({ topic, aggregateId: `a${i}` }));
      let settled = false;
      const pending = pub.publish(batch, never()).then((outcomes) => {
        settled = true;
        return outcomes;
      });
      // The broker has every message (the subscriber got them) but its PUBACKs are held back.
      const got = await arrived(ns, 11);
      expect(got.map((m) => userProperties(m.packet)['id'])).toEqual(
        expect.arrayContaining(batch.map((m) => m.eventId)),
      );
      await new Promise((r) => setTimeout(r, 200));
      expect(settled).toBe(false);

      await proxy.resume();
      expect(await pending).toEqual(batch.map(() => ({ ok: true })));
    } finally {
      await proxy.close();
    }
  });

  it('a PUBACK that never comes, nothing heard meanwhile, fails as BROKER_UNAVAILABLE after timeoutMs (no attempt); late acks are ignored; it goes on', async () => {
    const ns = namespace();
    await listen(ns);
    const proxy = await TcpProxy.start(BROKER);
    try {
      const pub = publisher({ url: `mqtt://127.0.0.1:${proxy.port}`, timeoutMs: 400 });
      const topic = `${PREFIX}/${ns}/late`;
      expect(await pub.publish([makeMessage({ topic })], never())).toEqual([{ ok: true }]);
      proxy.stall({ only: 'downstream' });
      const started = Date.now();
      const outcomes = await pub.publish(
        Array.from({ length: 5 }, () => makeMessage({ topic })),
        never(),
      );
      expect(Date.now() - started).toBeGreaterThanOrEqual(350);
      for (const outcome of outcomes) {
        const error = expectFailure(outcome, true);
        expect(error.message).toMatch(/Timed out after 400 ms waiting for the PUBACK.*in doubt/);
        expect(isBrokerUnavailable(error)).toBe(true);
      }
      await proxy.resume();
      expect(await pub.publish([makeMessage({ topic })], never())).toEqual([{ ok: true }]);
    } finally {
      await proxy.close();
    }
  });

  it('cut mid-batch: every acknowledged message was delivered, the rest fail as broker-unavailable, none is resent', async () => {
    const ns = namespace();
    await listen(ns);
    const proxy = await TcpProxy.start(BROKER);
    try {
      const pub = publisher({
        url: `mqtt://127.0.0.1:${proxy.port}`,
        timeoutMs: 5000,
        clientOptions: { reconnectPeriod: 100 },
      });
      const topic = `${PREFIX}/${ns}/cut`;
      expect(await pub.publish([makeMessage({ topic })], never())).toEqual([{ ok: true }]);
      const batch = Array.from({ length: 5000 }, (_, i) => makeMessage({ topic, aggregateId: `c${i}` }));
      const onMessage = (t: string): void => {
        if (t === topic && (received.get(ns)?.length ?? 0) >= 300) {
          subscriber.off('message', onMessage);
          void proxy.cut();
        }
      };
      subscriber.on('message', onMessage);
      const outcomes = await pub.publish(batch, never());
      const got = await arrived(ns, 300, 300);
      const delivered = new Set(got.map((m) => userProperties(m.packet)['id']));

      const ok = batch.filter((_, i) => outcomes[i]!.ok);
      expect(ok.length).toBeGreaterThanOrEqual(250);
      expect(ok.length).toBeLessThan(batch.length);
      for (const m of ok) expect(delivered.has(m.eventId)).toBe(true);
      outcomes.forEach((outcome) => {
        if (outcome.ok) return;
        const error = expectFailure(outcome, true);
        expect(error.code).toBe(BROKER_UNAVAILABLE);
      });
      // A message may be delivered with its PUBACK lost in the cut (at least once), but not many.
      expect(delivered.size - 1 - ok.length).toBeLessThanOrEqual(20);

      await proxy.restore();
      const again = makeMessage({ topic, aggregateId: 'after' });
      let last: PublishOutcome | undefined;
      const deadline = Date.now() + 10_000;
      while (Date.now() < deadline) {
        [last] = await pub.publish([again], never());
        if (last?.ok) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(last).toEqual({ ok: true });
      // The failed messages were dropped from MQTT.js's store: nothing is resent on reconnect.
      const after = await arrived(ns, got.length + 1, 300);
      const fresh = after.slice(got.length).map((m) => userProperties(m.packet)['id']);
      expect(fresh).toEqual([again.eventId]);
    } finally {
      await proxy.close();
    }
  }, 30_000);

  it('QoS 1 with user properties intact: envelope, user headers, content type, payload bytes', async () => {
    const ns = namespace();
    await listen(ns);
    const pub = publisher({ url: URL, ceSource: 'orders-service' });
    const topic = `${PREFIX}/${ns}/props`;
    const headers = {
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      tracestate: 'vendor=value',
      'x-tenant': 'acme',
      'x-unicode': 'héllo ✓ 日本 🚀',
    };
    const json = makeMessage({ topic, headers, aggregateId: 'props-1', sequence: 7, schemaVersion: 3 });
    const bytes = makeMessage({
      topic,
      headers,
      aggregateId: 'props-2',
      payload: new Uint8Array([0, 255, 1, 254, 10, 13]),
      contentType: 'application/octet-stream',
    });
    expect(await pub.publish([json, bytes], never())).toEqual([{ ok: true }, { ok: true }]);
    const got = await arrived(ns, 2);
    expect(got).toHaveLength(2);
    for (const [sent, r] of [
      [json, got[0]!],
      [bytes, got[1]!],
    ] as const) {
      expect(r.topic).toBe(topic);
      expect(r.packet.qos).toBe(1);
      expect(r.packet.retain).toBe(false);
      expect(userProperties(r.packet)).toEqual(envelopeHeaders(sent, 'orders-service', 'mqtt'));
      expect(r.packet.properties?.contentType).toBe(sent.contentType);
      expect(Buffer.from(r.payload).equals(Buffer.from(sent.payload))).toBe(true);
    }
    expect(got[0]!.packet.properties?.payloadFormatIndicator).toBe(true);
    expect(got[1]!.packet.properties?.payloadFormatIndicator).toBeFalsy();
  });

  it('QoS 2 is awaited to PUBCOMP and delivered once', async () => {
    const ns = namespace();
    await listen(ns);
    const pub = publisher({ url: URL, qos: 2 });
    const batch = Array.from({ length: 50 }, (_, i) =>
      makeMessage({ topic: `${PREFIX}/${ns}/q2`, aggregateId: `q${i}` }),
    );
    expect(await pub.publish(batch, never())).toEqual(batch.map(() => ({ ok: true })));
    const got = await arrived(ns, 50, 200);
    expect(got.map((m) => userProperties(m.packet)['id'])).toEqual(batch.map((m) => m.eventId));
  });

  it('derives the topic from topic, else aggregateType/type with dots as slashes, or from the destination option', async () => {
    const ns = namespace();
    await listen(ns);
    const pub = publisher({ url: URL });
    const given = makeMessage({ topic: `${PREFIX}/${ns}/given` });
    const derived = makeMessage({ topic: null, aggregateType: `${PREFIX}.${ns}`, type: 'order.created' });
    expect(await pub.publish([given, derived], never())).toEqual([{ ok: true }, { ok: true }]);
    const custom = publisher({ url: URL, destination: (m) => `${PREFIX}/${ns}/custom/${m.aggregateId}` });
    const routed = makeMessage({ aggregateId: 'o-42' });
    expect(await custom.publish([routed], never())).toEqual([{ ok: true }]);
    const got = await arrived(ns, 3);
    expect(got.map((m) => m.topic)).toEqual([
      `${PREFIX}/${ns}/given`,
      `${PREFIX}/${ns}/order/created`,
      `${PREFIX}/${ns}/custom/o-42`,
    ]);
  });

  it('refuses bad topics and headers permanently before sending; the rest of the batch and the connection are fine', async () => {
    const ns = namespace();
    await listen(ns);
    const client = await connectAsync(URL, { protocolVersion: 5, reconnectPeriod: 200 });
    clients.push(client);
    let sentPublishes = 0;
    let closes = 0;
    client.on('packetsend', (packet) => {
      if (packet.cmd === 'publish') sentPublishes += 1;
    });
    client.on('close', () => {
      closes += 1;
    });
    const pub = publisher({ client });
    const base = `${PREFIX}/${ns}`;
    const bad: Array<[string, Partial<OutboxMessage>, RegExp]> = [
      ['plus', { topic: `${base}/+/x` }, /wildcard/],
      ['hash', { topic: `${base}/#` }, /wildcard/],
      ['nul', { topic: `${base}/a\u0000b` }, /NUL/],
      ['control', { topic: `${base}/a\nb` }, /control character/],
      ['surrogate', { topic: `${base}/\ud800` }, /lone surrogate/],
      ['noncharacter', { topic: `${base}/\uffff` }, /noncharacter/],
      ['long', { topic: `${base}/${'é'.repeat(33_000)}` }, /bytes long in UTF-8; MQTT allows 65535/],
      [
        'header value',
        { topic: `${base}/ok`, headers: { 'x-bad': 'a\u0001b' } },
        /Header "x-bad".*value contains a control character/,
      ],
      ['header name', { topic: `${base}/ok`, headers: { 'x\u0000': 'v' } }, /name contains a NUL/],
    ];
    const good = [makeMessage({ topic: `${base}/ok` }), makeMessage({ topic: `${base}/ok` })];
    const batch = [good[0]!, ...bad.map(([, overrides]) => makeMessage(overrides)), good[1]!];
    const outcomes = await pub.publish(batch, never());
    expect(outcomes[0]).toEqual({ ok: true });
    expect(outcomes.at(-1)).toEqual({ ok: true });
    bad.forEach(([label, , pattern], i) => {
      const error = expectFailure(outcomes[i + 1], false);
      expect(`${label}: ${error.message}`).toMatch(pattern);
    });
    expect(sentPublishes).toBe(2);
    const got = await arrived(ns, 2);
    expect(got.map((m) => userProperties(m.packet)['id'])).toEqual(good.map((m) => m.eventId));
    expect(closes).toBe(0);

    const throwing = publisher({
      client,
      destination: () => {
        throw new Error('no route');
      },
    });
    const [thrown] = await throwing.publish([makeMessage()], never());
    expect(expectFailure(thrown, false).message).toMatch(/topic function threw.*no route/);
    const empty = publisher({ client, destination: () => '' });
    const [none] = await empty.publish([makeMessage()], never());
    expect(expectFailure(none, false).message).toMatch(/MQTT topic "" of event .* is invalid: it is empty/);
    expect(sentPublishes).toBe(2);
  });

  it('has many publishes in flight, never more than maxInFlight or the broker Receive Maximum', async () => {
    const ns = namespace();
    await listen(ns);
    for (const [maxInFlight, limit] of [
      [undefined, 20], // Mosquitto's default Receive Maximum
      [5, 5],
    ] as const) {
      const client = await connectAsync(URL, { protocolVersion: 5 });
      clients.push(client);
      expect(client.serverProperties?.receiveMaximum).toBe(20);
      let outstanding = 0;
      let peak = 0;
      client.on('packetsend', (packet) => {
        if (packet.cmd !== 'publish') return;
        outstanding += 1;
        peak = Math.max(peak, outstanding);
      });
      client.on('packetreceive', (packet) => {
        if (packet.cmd === 'puback') outstanding -= 1;
      });
      const pub = publisher(maxInFlight === undefined ? { client } : { client, maxInFlight });
      const batch = Array.from({ length: 500 }, (_, i) =>
        makeMessage({ topic: `${PREFIX}/${ns}/w`, aggregateId: `w${i}` }),
      );
      const outcomes = await pub.publish(batch, never());
      expect(outcomes.every((o) => o.ok)).toBe(true);
      expect(peak).toBe(limit);
    }
  });

  it('MQTT 3.1.1: CloudEvents structured JSON; a header it cannot carry is refused, not dropped', async () => {
    const ns = namespace();
    await listen(ns);
    const pub = publisher({ url: URL, protocolVersion: 4 });
    const topic = `${PREFIX}/${ns}/v311`;
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const json = makeMessage({
      topic,
      headers: { traceparent },
      json: { total: 12.5, items: ['a'] },
      sequence: 3,
    });
    const bytes = makeMessage({
      topic,
      payload: new Uint8Array([0, 255, 7]),
      contentType: 'application/octet-stream',
    });
    const tenant = makeMessage({ topic, headers: { 'x-tenant': 'acme', TraceParent: traceparent } });
    const outcomes = await pub.publish([json, bytes, tenant], never());
    expect(outcomes).toEqual([{ ok: true }, { ok: true }, { ok: true }]);

    const got = await arrived(ns, 3);
    expect(got).toHaveLength(3);
    expect(got[0]!.packet.properties?.userProperties).toBeUndefined();
    const first = JSON.parse(got[0]!.payload.toString('utf8'));
    expect(first).toEqual({
      specversion: '1.0',
      id: json.eventId,
      type: json.type,
      source: 'tx-outbox',
      time: json.createdAt.toISOString(),
      subject: json.aggregateId,
      datacontenttype: 'application/json',
      aggregatetype: json.aggregateType,
      aggregateid: json.aggregateId,
      sequence: '0000000000000000003',
      aggregatesequence: '3',
      schemaversion: '1',
      traceparent,
      data: { total: 12.5, items: ['a'] },
    });
    const second = JSON.parse(got[1]!.payload.toString('utf8'));
    expect(second.datacontenttype).toBe('application/octet-stream');
    expect(Buffer.from(second.data_base64, 'base64')).toEqual(Buffer.from([0, 255, 7]));
    // Headers that cannot be attributes travel in txoheaders, names as they were.
    const third = JSON.parse(got[2]!.payload.toString('utf8'));
    expect(JSON.parse(third.txoheaders)).toEqual({ 'x-tenant': 'acme', TraceParent: traceparent });
  });

  it('broker down from the start: fails fast as broker-unavailable, without crashing', async () => {
    const proxy = await TcpProxy.start(BROKER);
    await proxy.cut(); // a port nobody listens on
    try {
      const pub = publisher({ url: `mqtt://127.0.0.1:${proxy.port}`, timeoutMs: 5000 });
      const started = Date.now();
      const [outcome] = await pub.publish([makeMessage({ topic: `${PREFIX}/down/x` })], never());
      expect(Date.now() - started).toBeLessThan(2000);
      const error = expectFailure(outcome, true);
      expect(error.code).toBe(BROKER_UNAVAILABLE);
      expect(error.message).toMatch(
        /MQTT broker is not available \(mqtt:\/\/127\.0\.0\.1:\d+\): .*ECONNREFUSED/,
      );
      // The client retries in the background; publishing again fails fast too.
      const [again] = await pub.publish([makeMessage({ topic: `${PREFIX}/down/x` })], never());
      expect(expectFailure(again, true).code).toBe(BROKER_UNAVAILABLE);
      const closing = Date.now();
      await pub.close();
      expect(Date.now() - closing).toBeLessThan(1000);
    } finally {
      await proxy.close();
    }
  });

  it('close(): idempotent, settles in-flight publishes within timeoutMs, then refuses publishes', async () => {
    const ns = namespace();
    await listen(ns);
    const proxy = await TcpProxy.start(BROKER);
    try {
      const pub = mqttPublisher({ url: `mqtt://127.0.0.1:${proxy.port}`, timeoutMs: 500 });
      const topic = `${PREFIX}/${ns}/close`;
      expect(await pub.publish([makeMessage({ topic })], never())).toEqual([{ ok: true }]);
      proxy.stall({ only: 'downstream' });
      const inFlight = pub.publish(
        Array.from({ length: 100 }, () => makeMessage({ topic })),
        never(),
      );
      await new Promise((r) => setTimeout(r, 50));
      const started = Date.now();
      const first = pub.close();
      const second = pub.close();
      await Promise.all([first, second]);
      expect(Date.now() - started).toBeLessThan(2000);
      const outcomes = await inFlight;
      expect(outcomes).toHaveLength(100);
      for (const outcome of outcomes) expectFailure(outcome, true);
      const late = pub.publish([makeMessage({ topic })], never());
      await expect(late).rejects.toBeInstanceOf(OutboxError);
      await expect(late).rejects.toMatchObject({ code: 'TXO_PUBLISHER_CLOSED' });
      await pub.close();
    } finally {
      await proxy.close();
    }
  });

  it('leaves a client it was given connected on close', async () => {
    const ns = namespace();
    await listen(ns);
    const client = await connectAsync(URL, { protocolVersion: 5 });
    clients.push(client);
    const listeners = client.listenerCount('error') + client.listenerCount('close');
    const pub = mqttPublisher({ client });
    expect(await pub.publish([makeMessage({ topic: `${PREFIX}/${ns}/own` })], never())).toEqual([
      { ok: true },
    ]);
    await pub.close();
    expect(client.connected).toBe(true);
    expect(client.listenerCount('error') + client.listenerCount('close')).toBe(listeners);
    await client.publishAsync(`${PREFIX}/${ns}/own`, 'still mine', { qos: 1 });
  });

  it('stops waiting when the signal aborts, with retryable outcomes', async () => {
    const ns = namespace();
    await listen(ns);
    const proxy = await TcpProxy.start(BROKER);
    try {
      const pub = publisher({ url: `mqtt://127.0.0.1:${proxy.port}`, timeoutMs: 10_000 });
      const topic = `${PREFIX}/${ns}/abort`;
      expect(await pub.publish([makeMessage({ topic })], never())).toEqual([{ ok: true }]);
      proxy.stall({ only: 'downstream' });
      const started = Date.now();
      const outcomes = await pub.publish(
        Array.from({ length: 30 }, () => makeMessage({ topic })),
        AbortSignal.timeout(200),
      );
      expect(Date.now() - started).toBeLessThan(2000);
      const messages = outcomes.map((o) => expectFailure(o, true).message);
      expect(messages.filter((m) => m.includes('aborted before its PUBACK'))).toHaveLength(20);
      expect(messages.filter((m) => m.includes('cancelled before sending'))).toHaveLength(10);
    } finally {
      await proxy.close();
    }
  });
});

describe('mqttPublisher against a scripted broker', () => {
  it('maps PUBACK reason codes: permanent for not authorized, topic name invalid, payload format invalid', async () => {
    const broker = await FakeBroker.start({
      connack: connack5(),
      reasonCode: (topic) => Number.parseInt(topic.split('/')[1]!, 16),
    });
    try {
      const pub = publisher({ url: broker.url, timeoutMs: 2000 });
      // Every reason code MQTT 5 allows in a PUBACK (0x95 packet too large only comes as a DISCONNECT).
      const codes = [0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99];
      const outcomes = await pub.publish(
        codes.map((code) => makeMessage({ topic: `rc/${code.toString(16)}` })),
        never(),
      );
      const verdict = outcomes.map((o) => (o.ok ? 'ok' : o.retryable ? 'retryable' : 'permanent'));
      expect(verdict).toEqual([
        'ok', // success
        'ok', // no matching subscribers
        'retryable', // unspecified error
        'retryable', // implementation specific error
        'permanent', // not authorized
        'permanent', // topic name invalid
        'retryable', // packet identifier in use
        'retryable', // quota exceeded
        'permanent', // payload format invalid
      ]);
      expect(expectFailure(outcomes[4], false).message).toMatch(/reason 0x87 not authorized/);
      expect(expectFailure(outcomes[7], true).code).not.toBe(BROKER_UNAVAILABLE);
    } finally {
      await broker.close();
    }
  });

  it('a server DISCONNECT blaming the message (packet too large) fails in-flight publishes as ordinary retryable', async () => {
    const broker = await FakeBroker.start({
      connack: connack5(),
      reasonCode: (topic) => (topic === 'big/x' ? { disconnect: 0x95 } : undefined),
    });
    try {
      const pub = publisher({ url: broker.url, timeoutMs: 5000 });
      const [outcome] = await pub.publish([makeMessage({ topic: 'big/x' })], never());
      const error = expectFailure(outcome, true);
      // Charged an attempt: a message that makes the broker hang up cannot be retried for free forever.
      expect(error.code).not.toBe(BROKER_UNAVAILABLE);
      expect(error.message).toMatch(/server DISCONNECT, reason 0x95 packet too large/);
    } finally {
      await broker.close();
    }
  });

  it('does not hang past timeoutMs on a server that accepts TCP but never answers CONNECT', async () => {
    const broker = await FakeBroker.start({ connack: Buffer.alloc(0) });
    try {
      const pub = mqttPublisher({ url: broker.url, timeoutMs: 300 });
      const started = Date.now();
      const [outcome] = await pub.publish([makeMessage({ topic: 'silent/x' })], never());
      expect(Date.now() - started).toBeLessThan(1500);
      expect(expectFailure(outcome, true).code).toBe(BROKER_UNAVAILABLE);
      const closing = Date.now();
      await pub.close();
      expect(Date.now() - closing).toBeLessThan(1000);
    } finally {
      await broker.close();
    }
  });

  it('refuses a packet over the broker Maximum Packet Size before sending', async () => {
    const broker = await FakeBroker.start({
      connack: connack5({ maximumPacketSize: 2048 }),
      reasonCode: () => 0,
    });
    try {
      const pub = publisher({ url: broker.url, timeoutMs: 2000 });
      const small = makeMessage({ topic: 'size/small' });
      const big = makeMessage({ topic: 'size/big', payload: Buffer.alloc(4096, 1) });
      const outcomes = await pub.publish([small, big], never());
      expect(outcomes[0]).toEqual({ ok: true });
      expect(expectFailure(outcomes[1], false).message).toMatch(
        /would be \d+ bytes; the MQTT broker accepts at most 2048/,
      );
      expect(broker.published).toEqual(['size/small']);
    } finally {
      await broker.close();
    }
  });

  it('a broker that refuses MQTT 5 is reported clearly, as broker-unavailable (nothing sent in another format)', async () => {
    for (const connack of [
      Buffer.from([0x20, 0x03, 0x00, 0x84, 0x00]), // MQTT 5: unsupported protocol version
      Buffer.from([0x20, 0x02, 0x00, 0x01]), // MQTT 3.1.1 broker: unacceptable protocol version
    ]) {
      const broker = await FakeBroker.start({ connack });
      try {
        const pub = publisher({ url: broker.url, timeoutMs: 2000 });
        const [outcome] = await pub.publish([makeMessage({ topic: 'v5/x' })], never());
        const error = expectFailure(outcome, true);
        expect(error.code).toBe(BROKER_UNAVAILABLE);
        expect(error.message).toMatch(/refuses MQTT 5.*protocolVersion: 4/);
        expect(broker.published).toEqual([]);
        await pub.close();
      } finally {
        await broker.close();
      }
    }
  });
});

describe('mqttPublisher options', () => {
  it('rejects invalid options', () => {
    const cases: Array<[MqttPublisherOptions, string]> = [
      [{}, 'url'],
      [{ url: '127.0.0.1:1883 ' }, 'url'],
      [{ url: URL, client: subscriber }, 'client'],
      [{ url: URL, qos: 0 as 1 }, 'qos'],
      [{ url: URL, protocolVersion: 3 as 4 }, 'protocolVersion'],
      [{ url: URL, maxInFlight: 70_000 }, 'maxInFlight'],
      [{ url: URL, maxInFlight: 0 }, 'maxInFlight'],
      [{ url: URL, timeoutMs: 1.5 }, 'timeoutMs'],
      [{ client: subscriber, protocolVersion: 4 }, 'protocolVersion'],
    ];
    for (const [options, field] of cases) {
      let caught: unknown;
      try {
        mqttPublisher(options);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(OutboxValidationError);
      expect((caught as OutboxValidationError).field).toBe(field);
    }
  });

  it('is named mqtt and connects lazily', async () => {
    const pub = mqttPublisher({ url: 'mqtt://127.0.0.1:1' });
    expect(pub.name).toBe('mqtt');
    await pub.close();
  });
});
