import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection, nanos } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { isBrokerUnavailable, OutboxError, OutboxValidationError, PublishError } from '../../src/errors.js';
import type { Publisher, PublishOutcome } from '../../src/publishers/contract.js';
import { ensureStream, type NatsPublishMode, natsPublisher } from '../../src/publishers/nats/index.js';
import { NATS_URL } from '../helpers/env.js';
import { makeMessage } from '../helpers/messages.js';
import { PrivateNats } from '../helpers/processes.js';
import { expectNoUnhandledRejections } from '../helpers/unhandled.js';

const MODES: readonly NatsPublishMode[] = ['pipeline', 'client'];

// Unique per run: test files run in parallel against one shared NATS server.
const suffix = randomUUID().slice(0, 8);
const ROOT = `txo-nats-${suffix}`;
const STREAM = `TXO_NATS_${suffix}`;
const OTHER_STREAM = `TXO_NATS_OTHER_${suffix}`;
const autoStream = (mode: NatsPublishMode): string => `TXO_NATS_AUTO_${mode.toUpperCase()}_${suffix}`;
const UNUSED_URL = 'nats://127.0.0.1:4999';

let nc: NatsConnection;
let jsm: JetStreamManager;
const publishers: Publisher[] = [];

function publisher(options: Parameters<typeof natsPublisher>[0]): Publisher {
  const created = natsPublisher(options);
  publishers.push(created);
  return created;
}

/** Event ids stored on `subject`, in stream order (headers only). */
async function storedIds(stream: string, subject: string, expected: number): Promise<string[]> {
  const consumer = await jetstream(nc).consumers.get(stream, {
    filter_subjects: subject,
    headers_only: true,
  });
  const ids: string[] = [];
  const messages = await consumer.consume();
  for await (const m of messages) {
    ids.push(m.headers?.get('Nats-Msg-Id') ?? '');
    if (ids.length === expected) break;
  }
  return ids;
}

function never(): AbortSignal {
  return new AbortController().signal;
}

function subjectCount(info: { state: { subjects?: Record<string, number> } }, subject: string): number {
  return info.state.subjects?.[subject] ?? 0;
}

function expectFailure(outcome: PublishOutcome | undefined, retryable: boolean): PublishError {
  expect(outcome?.ok).toBe(false);
  if (outcome === undefined || outcome.ok) throw new Error('expected a failed outcome');
  expect(outcome.retryable).toBe(retryable);
  expect(outcome.error).toBeInstanceOf(PublishError);
  return outcome.error as PublishError;
}

expectNoUnhandledRejections();

beforeAll(async () => {
  nc = await connect({ servers: NATS_URL });
  jsm = await jetstreamManager(nc);
  await ensureStream(nc, { name: STREAM, subjects: [`${ROOT}.>`] });
  await ensureStream(nc, { name: OTHER_STREAM, subjects: [`${ROOT}-other.>`] });
});

afterAll(async () => {
  await Promise.allSettled(publishers.map((p) => p.close()));
  for (const name of [STREAM, OTHER_STREAM, ...MODES.map((m) => autoStream(m))])
    await jsm.streams.delete(name).catch(() => false);
  await nc.close();
});

describe.each(MODES)('natsPublisher in %s mode', (mode) => {
  const PREFIX = `${ROOT}.${mode}`; // captured by STREAM
  const OTHER = `${ROOT}-other.${mode}`; // captured by OTHER_STREAM
  const LOOSE = `${ROOT}-${mode}`; // captured by no stream
  const AUTO = autoStream(mode);

  function publisher(options: Parameters<typeof natsPublisher>[0]): Publisher {
    const created = natsPublisher({ mode, ...options });
    publishers.push(created);
    return created;
  }

  it('publishes a batch with the envelope headers (NATS binding), Nats-Msg-Id and the payload bytes unchanged', async () => {
    const pub = publisher({ url: NATS_URL, stream: STREAM, ceSource: 'urn:orders:service' });
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const batch = Array.from({ length: 5 }, (_, i) =>
      makeMessage({
        topic: `${PREFIX}.batch.${i}`,
        aggregateId: ` agg ${i}/é`,
        sequence: i + 1,
        schemaVersion: 2,
        headers: { traceparent, 'x-tenant': 'acme' },
        payload: i === 0 ? new Uint8Array([0, 255, 1, 254, 10, 13]) : Buffer.from(JSON.stringify({ i })),
        contentType: i === 0 ? 'application/octet-stream' : 'application/json',
      }),
    );
    const outcomes = await pub.publish(batch, never());
    expect(outcomes).toEqual(batch.map(() => ({ ok: true })));

    for (const message of batch) {
      const stored = await jsm.streams.getMessage(STREAM, { last_by_subj: message.topic! });
      expect(stored).not.toBeNull();
      expect(Buffer.from(stored!.data).equals(Buffer.from(message.payload))).toBe(true);
      const h = stored!.header;
      expect(h.get('Nats-Msg-Id')).toBe(message.eventId);
      // Values percent-encoded as the binding says (HTTP §3.1.3.2): the id's edge space survives.
      const id = `%20agg%20${message.sequence - 1}/%C3%A9`;
      expect(Object.fromEntries([...h].map(([name, values]) => [name, values.join(',')]))).toEqual({
        traceparent,
        'x-tenant': 'acme',
        'ce-specversion': '1.0',
        'ce-id': message.eventId,
        'ce-source': 'urn:orders:service',
        'ce-type': message.type,
        'ce-time': message.createdAt.toISOString(),
        'ce-subject': id,
        'ce-datacontenttype': message.contentType,
        'ce-aggregatetype': message.aggregateType,
        'ce-aggregateid': id,
        'ce-sequence': `000000000000000000${message.sequence}`,
        'ce-aggregatesequence': String(message.sequence),
        'ce-schemaversion': '2',
        'Nats-Msg-Id': message.eventId,
        'Nats-Expected-Stream': STREAM,
      });
    }
  });

  it('reports a republished event id as delivered and the stream keeps one copy', async () => {
    const pub = publisher({ url: NATS_URL });
    const subject = `${PREFIX}.dedup`;
    const message = makeMessage({ topic: subject });
    expect(await pub.publish([message], never())).toEqual([{ ok: true }]);
    expect(await pub.publish([{ ...message, attempts: 1 }], never())).toEqual([{ ok: true }]);
    expect(await pub.publish([message, message], never())).toEqual([{ ok: true }, { ok: true }]);
    const info = await jsm.streams.info(STREAM, { subjects_filter: subject });
    expect(subjectCount(info, subject)).toBe(1);
  });

  it('derives the subject from topic, else aggregateType.type, or from the subject option', async () => {
    const pub = publisher({ url: NATS_URL, stream: STREAM });
    const byTopic = makeMessage({ topic: `${PREFIX}.explicit` });
    const byDefault = makeMessage({ topic: null, aggregateType: `${PREFIX}`, type: 'invoice.paid' });
    const byEmptyTopic = makeMessage({ topic: '', aggregateType: `${PREFIX}`, type: 'invoice.voided' });
    expect(await pub.publish([byTopic, byDefault, byEmptyTopic], never())).toEqual([
      { ok: true },
      { ok: true },
      { ok: true },
    ]);
    const custom = publisher({ client: nc, destination: (m) => `${PREFIX}.custom.${m.aggregateId}` });
    const byFunction = makeMessage({ topic: 'ignored.topic', aggregateId: 'a-42' });
    expect(await custom.publish([byFunction], never())).toEqual([{ ok: true }]);

    const subjects = [`${PREFIX}.explicit`, `${PREFIX}.invoice.paid`, `${PREFIX}.invoice.voided`];
    for (const subject of [...subjects, `${PREFIX}.custom.a-42`]) {
      const info = await jsm.streams.info(STREAM, { subjects_filter: subject });
      expect(subjectCount(info, subject)).toBe(1);
    }
  });

  it('fails a bad subject permanently while the rest of the batch succeeds', async () => {
    const pub = publisher({ url: NATS_URL });
    const bad = ['a..b', `${PREFIX}.*`, `${PREFIX}.>`, 'has space', `${PREFIX}.tab\there`, '.lead', 'trail.'];
    const batch = [
      makeMessage({ topic: `${PREFIX}.good.1` }),
      ...bad.map((topic) => makeMessage({ topic })),
      makeMessage({ topic: `${PREFIX}.good.2` }),
    ];
    const outcomes = await pub.publish(batch, never());
    expect(outcomes[0]).toEqual({ ok: true });
    expect(outcomes.at(-1)).toEqual({ ok: true });
    bad.forEach((subject, i) => {
      const error = expectFailure(outcomes[i + 1], false);
      expect(error.message).toContain(subject);
      expect(error.code).toBe('TXO_PUBLISH_PERMANENT');
    });
    const thrower = publisher({
      url: NATS_URL,
      destination: () => {
        throw new Error('no route');
      },
    });
    expectFailure((await thrower.publish([makeMessage()], never()))[0], false);
  });

  it('fails a payload over max_payload permanently while the rest of the batch succeeds', async () => {
    const pub = publisher({ url: NATS_URL });
    const maxPayload = nc.info!.max_payload;
    const batch = [
      makeMessage({ topic: `${PREFIX}.big.ok` }),
      // over the limit on its own: refused before sending
      makeMessage({ topic: `${PREFIX}.big.1`, payload: randomBytes(maxPayload + 1) }),
      // fits alone, but not with the envelope headers: the client refuses it
      makeMessage({ topic: `${PREFIX}.big.2`, payload: randomBytes(maxPayload - 8) }),
      makeMessage({ topic: `${PREFIX}.big.ok2` }),
    ];
    const outcomes = await pub.publish(batch, never());
    expect(outcomes[0]).toEqual({ ok: true });
    expect(expectFailure(outcomes[1], false).message).toContain(`${PREFIX}.big.1`);
    expect(expectFailure(outcomes[2], false).message).toContain(`${PREFIX}.big.2`);
    expect(outcomes[3]).toEqual({ ok: true });
    // the connection survived: the server never saw an oversized message
    expect(await pub.publish([makeMessage({ topic: `${PREFIX}.big.after` })], never())).toEqual([
      { ok: true },
    ]);
  });

  it('fails permanently when the subject belongs to another stream than the expected one', async () => {
    const pub = publisher({ url: NATS_URL, stream: OTHER_STREAM });
    const outcomes = await pub.publish(
      [makeMessage({ topic: `${PREFIX}.wrong-stream` }), makeMessage({ topic: `${OTHER}.right` })],
      never(),
    );
    expect(expectFailure(outcomes[0], false).message).toContain(`${PREFIX}.wrong-stream`);
    expect(outcomes[1]).toEqual({ ok: true });
  });

  it('fails as retryable, an attempt, when no stream captures the subject (no responders)', async () => {
    const pub = publisher({ url: NATS_URL, timeoutMs: 2000 });
    const subject = `txo-nostream-${suffix}.x`;
    const started = Date.now();
    const [outcome] = await pub.publish([makeMessage({ topic: subject })], never());
    const error = expectFailure(outcome, true);
    expect(error.message).toContain(subject);
    expect(error.message).toContain('no responders');
    // JetStream answers: the subject is the event's trouble, not an outage (see nats-no-stream.test.ts).
    expect(isBrokerUnavailable(error)).toBe(false);
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('fails a header NATS cannot carry permanently while the rest of the batch succeeds', async () => {
    const pub = publisher({ url: NATS_URL });
    const outcomes = await pub.publish(
      [
        makeMessage({ topic: `${PREFIX}.hdr.bad`, headers: { 'x-note': 'line\nbreak' } }),
        makeMessage({ topic: `${PREFIX}.hdr.badname`, headers: { 'bad name': 'v' } }),
        // nats.js trims values on both ends (0.1 trimmed them silently): refused, never altered.
        makeMessage({ topic: `${PREFIX}.hdr.padded`, headers: { 'x-note': '  padded  ' } }),
        makeMessage({ topic: `${PREFIX}.hdr.nbsp`, headers: { 'x-note': 'no-break\u00a0' } }),
        makeMessage({ topic: `${PREFIX}.hdr.ok`, headers: { 'x-note': 'inner  spaces, "é" %41' } }),
      ],
      never(),
    );
    expect(expectFailure(outcomes[0], false).message).toContain(`${PREFIX}.hdr.bad`);
    expect(expectFailure(outcomes[1], false).message).toContain(`${PREFIX}.hdr.badname`);
    for (const i of [2, 3]) {
      expect(expectFailure(outcomes[i], false).message).toMatch(
        /^Invalid header for subject ".+": header x-note: its value starts or ends with whitespace, which NATS clients trim/,
      );
    }
    expect(outcomes[4]).toEqual({ ok: true });
    const stored = await jsm.streams.getMessage(STREAM, { last_by_subj: `${PREFIX}.hdr.ok` });
    expect(stored!.header.get('x-note')).toBe('inner  spaces, "é" %41');
    for (const subject of ['padded', 'nbsp']) {
      const info = await jsm.streams.info(STREAM, { subjects_filter: `${PREFIX}.hdr.${subject}` });
      expect(subjectCount(info, `${PREFIX}.hdr.${subject}`)).toBe(0);
    }
  });

  it('creates the stream at first use with file storage and the duplicate window', async () => {
    const pub = publisher({
      url: NATS_URL,
      stream: AUTO,
      streamSubjects: [`${LOOSE}-auto.>`],
      dedupWindowMs: 30_000,
    });
    const batch = [makeMessage({ topic: `${LOOSE}-auto.a` }), makeMessage({ topic: `${LOOSE}-auto.b` })];
    expect(await pub.publish(batch, never())).toEqual([{ ok: true }, { ok: true }]);
    const info = await jsm.streams.info(AUTO);
    expect(info.config.storage).toBe('file');
    expect(info.config.subjects).toEqual([`${LOOSE}-auto.>`]);
    expect(info.config.duplicate_window).toBe(nanos(30_000));
    expect(info.state.messages).toBe(2);
  });

  it('bounds un-acked publishes with maxInFlight and still delivers everything', async () => {
    const pub = publisher({ url: NATS_URL, maxInFlight: 3 });
    const batch = Array.from({ length: 40 }, (_, i) => makeMessage({ topic: `${PREFIX}.bounded.${i % 4}` }));
    const [first, second] = await Promise.all([
      pub.publish(batch.slice(0, 20), never()),
      pub.publish(batch.slice(20), never()),
    ]);
    expect([...first, ...second].every((o) => o.ok)).toBe(true);
    const info = await jsm.streams.info(STREAM, { subjects_filter: `${PREFIX}.bounded.*` });
    expect(Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0)).toBe(40);
  });

  it('never has more than maxInFlight publishes awaiting their PubAck', async () => {
    // A plain NATS responder stands in for the stream so the test can see concurrency.
    const subject = `${LOOSE}-acker`;
    let outstanding = 0;
    let peak = 0;
    let seq = 0;
    const sub = nc.subscribe(`${subject}.>`, {
      callback: (_err, msg) => {
        outstanding += 1;
        peak = Math.max(peak, outstanding);
        setTimeout(() => {
          outstanding -= 1;
          seq += 1;
          msg.respond(JSON.stringify({ stream: 'FAKE', seq }));
        }, 15);
      },
    });
    await nc.flush();
    try {
      const pub = publisher({ url: NATS_URL, maxInFlight: 3 });
      const batch = Array.from({ length: 12 }, (_, i) => makeMessage({ topic: `${subject}.${i}` }));
      const outcomes = await Promise.all([
        pub.publish(batch.slice(0, 6), never()),
        pub.publish(batch.slice(6), never()),
      ]);
      expect(outcomes.flat().every((o) => o.ok)).toBe(true);
      expect(peak).toBe(3);
    } finally {
      sub.unsubscribe();
    }
  });

  describe('when the PubAck never comes (a silent responder holds the subject)', () => {
    const silent = `${LOOSE}-silent`;
    let received = 0;

    beforeAll(async () => {
      nc.subscribe(`${silent}.>`, {
        callback: () => {
          received += 1;
        },
      });
      await nc.flush();
    });

    it('fails as retryable after timeoutMs', async () => {
      const pub = publisher({ url: NATS_URL, timeoutMs: 300 });
      const started = Date.now();
      const outcomes = await pub.publish([makeMessage({ topic: `${silent}.t` })], never());
      const error = expectFailure(outcomes[0], true);
      expect(error.message).toContain(`${silent}.t`);
      expect(error.message).toContain('Timed out');
      expect(Date.now() - started).toBeLessThan(1000);
      expect(received).toBeGreaterThan(0);
    });

    it('stops waiting as soon as the signal aborts', async () => {
      const pub = publisher({ url: NATS_URL, timeoutMs: 2000, maxInFlight: 2 });
      await pub.publish([makeMessage({ topic: `${PREFIX}.warm` })], never());
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error('relay stopping')), 100);
      const started = Date.now();
      const batch = Array.from({ length: 5 }, () => makeMessage({ topic: `${silent}.abort` }));
      const outcomes = await pub.publish(batch, controller.signal);
      expect(Date.now() - started).toBeLessThan(1000);
      for (const outcome of outcomes) expectFailure(outcome, true);
    });

    it('closes within timeoutMs with un-acked publishes in flight', async () => {
      const pub = publisher({ url: NATS_URL, timeoutMs: 500 });
      await pub.publish([makeMessage({ topic: `${PREFIX}.warm` })], never());
      const started = Date.now();
      const pending = pub.publish([makeMessage({ topic: `${silent}.close` })], never());
      await new Promise((resolve) => setTimeout(resolve, 20));
      await pub.close();
      expect(Date.now() - started).toBeLessThan(1500);
      expectFailure((await pending)[0], true);
    });
  });

  it('does not hang past timeoutMs when a server accepts TCP but never speaks NATS', async () => {
    const sockets = new Set<Socket>();
    const server: Server = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    try {
      const pub = publisher({ url: `nats://127.0.0.1:${port}`, timeoutMs: 400 });
      const started = Date.now();
      expectFailure((await pub.publish([makeMessage()], never()))[0], true);
      expect(Date.now() - started).toBeLessThan(1200);
      const controller = new AbortController();
      setTimeout(() => controller.abort(), 50);
      const slow = publisher({ url: `nats://127.0.0.1:${port}`, timeoutMs: 10_000 });
      const abortedAt = Date.now();
      expectFailure((await slow.publish([makeMessage()], controller.signal))[0], true);
      expect(Date.now() - abortedAt).toBeLessThan(1000);
      const closing = Date.now();
      await slow.close();
      expect(Date.now() - closing).toBeLessThan(500);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('fails as retryable within the timeout when NATS is unavailable, without crashing', async () => {
    const pub = publisher({ url: 'nats://user:secret@127.0.0.1:4999', timeoutMs: 1000 });
    for (let round = 0; round < 2; round += 1) {
      const started = Date.now();
      const outcomes = await pub.publish(
        [makeMessage(), makeMessage(), makeMessage({ topic: 'bad..' })],
        never(),
      );
      expect(Date.now() - started).toBeLessThan(1500);
      const error = expectFailure(outcomes[0], true);
      expect(error.message).toContain('NATS is not available');
      expect(error.message).not.toContain('secret');
      expect(isBrokerUnavailable(error)).toBe(true);
      expectFailure(outcomes[1], true);
      expectFailure(outcomes[2], false); // validation needs no connection
    }
    await pub.close();
  });

  it('stops waiting when the signal aborts, with retryable outcomes', async () => {
    const pub = publisher({ url: UNUSED_URL, timeoutMs: 10_000 });
    const aborted = new AbortController();
    aborted.abort(new Error('relay stopping'));
    expectFailure((await pub.publish([makeMessage()], aborted.signal))[0], true);

    const live = publisher({ url: NATS_URL });
    expectFailure(
      (await live.publish([makeMessage({ topic: `${PREFIX}.aborted` })], aborted.signal))[0],
      true,
    );
  });

  it('closes with publishes in flight without hanging, then rejects publishes', async () => {
    const pub = publisher({ url: NATS_URL, timeoutMs: 3000 });
    await pub.publish([makeMessage({ topic: `${PREFIX}.warmup` })], never());
    const batch = Array.from({ length: 300 }, (_, i) => makeMessage({ topic: `${PREFIX}.closing.${i}` }));
    const started = Date.now();
    const pending = pub.publish(batch, never());
    await Promise.all([pub.close(), pub.close()]);
    const outcomes = await pending;
    expect(Date.now() - started).toBeLessThan(3000);
    expect(outcomes).toHaveLength(300);
    for (const outcome of outcomes) if (!outcome.ok) expect(outcome.retryable).toBe(true);
    await pub.close();
    const error = await pub.publish([makeMessage()], never()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxError);
    expect((error as OutboxError).code).toBe('TXO_PUBLISHER_CLOSED');
  });

  it('closes while still connecting without hanging', async () => {
    const pub = publisher({ url: UNUSED_URL, timeoutMs: 1000 });
    const pending = pub.publish([makeMessage()], never());
    await pub.close();
    expectFailure((await pending)[0], true);
  });

  it('leaves a connection it was given open on close', async () => {
    const pub = publisher({ client: nc });
    expect(await pub.publish([makeMessage({ topic: `${PREFIX}.shared` })], never())).toEqual([{ ok: true }]);
    await pub.close();
    expect(nc.isClosed()).toBe(false);
  });
});

describe('natsPublisher options', () => {
  it('rejects invalid options', () => {
    expect(() => natsPublisher({})).toThrow(OutboxValidationError);
    expect(() => natsPublisher({ url: NATS_URL, client: nc })).toThrow(OutboxValidationError);
    expect(() => natsPublisher({ url: NATS_URL, streamSubjects: ['a.>'] })).toThrow(OutboxValidationError);
    expect(() => natsPublisher({ url: NATS_URL, maxInFlight: 0 })).toThrow(OutboxValidationError);
    expect(() => natsPublisher({ url: NATS_URL, timeoutMs: -1 })).toThrow(OutboxValidationError);
    expect(() => natsPublisher({ url: NATS_URL, mode: 'fast' as NatsPublishMode })).toThrow(
      OutboxValidationError,
    );
  });

  it('still takes the deprecated spellings servers, connection, connectionOptions and subject, warning once each', async () => {
    const subject = `${ROOT}.old-spelling`;
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const old = publisher({
        servers: NATS_URL,
        connectionOptions: { name: 'old' },
        subject: () => subject,
      });
      publisher({ servers: NATS_URL, subject: () => subject });
      const shared = publisher({ connection: nc, subject: () => subject });
      expect(await old.publish([makeMessage({ topic: 'ignored' })], never())).toEqual([{ ok: true }]);
      expect(await shared.publish([makeMessage({ topic: 'ignored' })], never())).toEqual([{ ok: true }]);
      const info = await jsm.streams.info(STREAM, { subjects_filter: subject });
      expect(subjectCount(info, subject)).toBe(2);
      const deprecated = warn.mock.calls
        .map(([text]) => String(text))
        .filter((t) => t.startsWith('natsPublisher'));
      expect(deprecated).toEqual([
        'natsPublisher: option `servers` is deprecated, use `url` (the old spelling goes in the next minor version)',
        'natsPublisher: option `connectionOptions` is deprecated, use `clientOptions` (the old spelling goes in the next minor version)',
        'natsPublisher: option `subject` is deprecated, use `destination` (the old spelling goes in the next minor version)',
        'natsPublisher: option `connection` is deprecated, use `client` (the old spelling goes in the next minor version)',
      ]);
    } finally {
      warn.mockRestore();
    }
    expect(() => natsPublisher({ servers: NATS_URL, url: NATS_URL })).toThrow(OutboxValidationError);
  });

  it('exposes the name nats', () => {
    expect(publisher({ url: NATS_URL }).name).toBe('nats');
    expect(publisher({ url: NATS_URL, mode: 'client' }).name).toBe('nats');
  });
});

describe('natsPublisher pipeline', () => {
  const PREFIX = `${ROOT}.lean`;
  const LOOSE = `${ROOT}-lean`;

  it('acknowledges 5,000 messages of one batch, stores each once, in batch order', async () => {
    const pub = publisher({ url: NATS_URL, stream: STREAM, maxInFlight: 500 });
    const subject = `${PREFIX}.bulk`;
    const batch = Array.from({ length: 5000 }, (_, i) =>
      makeMessage({ topic: subject, aggregateId: `bulk-${i}`, json: { i, pad: 'x'.repeat(200) } }),
    );
    const outcomes = await pub.publish(batch, never());
    expect(outcomes.filter((o) => !o.ok)).toEqual([]);
    expect(outcomes).toHaveLength(5000);
    expect(await storedIds(STREAM, subject, 5000)).toEqual(batch.map((m) => m.eventId));
    // republished (a relay retry): all delivered as duplicates, nothing stored twice
    expect((await pub.publish(batch.slice(0, 100), never())).every((o) => o.ok)).toBe(true);
    const info = await jsm.streams.info(STREAM, { subjects_filter: subject });
    expect(subjectCount(info, subject)).toBe(5000);
  });

  it('stores every byte of a batch that spans many socket writes and chunks, UTF-8 subjects and headers included', async () => {
    const pub = publisher({ url: NATS_URL, stream: STREAM, maxInFlight: 64 });
    // Sizes from 0 to 300 KB: messages straddle the 64 KB writes and the 256 KB chunks, and
    // some are larger than a chunk on their own.
    const sizes = [0, 1, 65_000, 70_000, 200, 262_000, 300_000, 5, 64 * 1024, 131_000, 17, 256 * 1024];
    const batch = sizes.map((size, i) =>
      makeMessage({
        topic: `${PREFIX}.bytes.ü${i}`,
        aggregateId: `bytes-é-${i}`,
        payload: randomBytes(size),
        contentType: 'application/octet-stream',
        headers: { 'x-note': `naïve ${i} ✓` },
      }),
    );
    const outcomes = await pub.publish(batch, never());
    expect(outcomes.filter((o) => !o.ok)).toEqual([]);
    const consumer = await jetstream(nc).consumers.get(STREAM, { filter_subjects: `${PREFIX}.bytes.>` });
    const seen = new Map<string, { subject: string; data: Uint8Array; note: string | undefined }>();
    const messages = await consumer.consume();
    for await (const m of messages) {
      seen.set(m.headers?.get('Nats-Msg-Id') ?? '', {
        subject: m.subject,
        data: m.data,
        note: m.headers?.get('x-note'),
      });
      if (seen.size === batch.length) break;
    }
    for (const m of batch) {
      const got = seen.get(m.eventId);
      expect(got?.subject).toBe(m.topic);
      expect(Buffer.compare(Buffer.from(got?.data ?? []), Buffer.from(m.payload))).toBe(0);
      expect(decodeURIComponent(got?.note ?? '')).toBe(m.headers['x-note']);
    }
  });

  it('fails only the messages whose PubAck times out, and frees their slots', async () => {
    const silent = `${LOOSE}-mute`;
    const sub = nc.subscribe(`${silent}.>`, { callback: () => undefined });
    await nc.flush();
    try {
      const pub = publisher({ url: NATS_URL, timeoutMs: 400, maxInFlight: 4 });
      const batch = Array.from({ length: 16 }, (_, i) =>
        makeMessage({ topic: i % 5 === 1 ? `${silent}.${i}` : `${PREFIX}.timeouts.${i}` }),
      );
      const started = Date.now();
      const outcomes = await pub.publish(batch, never());
      expect(Date.now() - started).toBeLessThan(2000);
      outcomes.forEach((outcome, i) => {
        if (i % 5 !== 1) {
          expect(outcome).toEqual({ ok: true });
          return;
        }
        const error = expectFailure(outcome, true);
        expect(error.message).toContain('Timed out');
        expect(error.message).toContain(`${silent}.${i}`);
        expect(isBrokerUnavailable(error)).toBe(false);
      });
      // every slot came back: a batch needing all four still goes through
      const after = Array.from({ length: 8 }, (_, i) =>
        makeMessage({ topic: `${PREFIX}.timeouts.after.${i}` }),
      );
      expect(await pub.publish(after, never())).toEqual(after.map(() => ({ ok: true })));
    } finally {
      sub.unsubscribe();
    }
  });

  it('recovers when its NATS server restarts mid-stream: lost PubAcks fail fast, no event is stored twice', async () => {
    const server = await PrivateNats.start();
    const stream = `TXO_NATS_RESTART_${suffix}`;
    try {
      const pub = publisher({
        url: server.url,
        stream,
        streamSubjects: ['restart.>'],
        timeoutMs: 8000,
        clientOptions: { reconnectTimeWait: 100 },
      });
      const silentSub = await connect({ servers: server.url });
      silentSub.subscribe('mute.>', { callback: () => undefined });
      await silentSub.flush();

      // A relay-like loop: batches of 250, failed events retried in the next batch. Meanwhile
      // the server is killed under it (with a publish whose PubAck never comes) and restarted.
      const events = Array.from({ length: 6000 }, (_, i) => makeMessage({ topic: `restart.${i % 7}` }));
      let queue = [...events];
      let unavailable = 0;
      let outage: Promise<void> | undefined;
      let lost: { outcome: PublishOutcome | undefined; afterMs: number } | undefined;
      const deadline = Date.now() + 12_000;
      while (queue.length > 0 && Date.now() < deadline) {
        if (outage === undefined && events.length - queue.length >= 1000) {
          const hanging = pub.publish([makeMessage({ topic: 'mute.x' })], never());
          outage = (async () => {
            await new Promise((resolve) => setTimeout(resolve, 10));
            const killedAt = Date.now();
            await server.down();
            const [outcome] = await hanging;
            lost = { outcome, afterMs: Date.now() - killedAt };
            await new Promise((resolve) => setTimeout(resolve, 300));
            await server.up();
          })();
        }
        const batch = queue.slice(0, 250);
        const outcomes = await pub.publish(batch, never());
        const failedEvents = batch.filter((_, i) => !outcomes[i]!.ok);
        for (const outcome of outcomes) {
          if (outcome.ok) continue;
          expect(outcome.retryable).toBe(true);
          if (isBrokerUnavailable(outcome.error)) unavailable += 1;
        }
        queue = [...failedEvents, ...queue.slice(batch.length)];
        if (failedEvents.length > 0) await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await outage;
      // The publish whose PubAck was lost failed when the connection dropped, not after timeoutMs.
      expect(lost!.afterMs).toBeLessThan(2000);
      expect(isBrokerUnavailable(expectFailure(lost!.outcome, true))).toBe(true);
      expect(queue).toEqual([]);
      expect(unavailable).toBeGreaterThan(0);
      // The reply subscription came back with the connection: PubAcks arrive again.
      expect(await pub.publish([makeMessage({ topic: 'restart.after' })], never())).toEqual([{ ok: true }]);
      await silentSub.close();
      const check = await connect({ servers: server.url });
      const info = await (await jetstreamManager(check)).streams.info(stream);
      await check.close();
      expect(info.state.messages).toBe(events.length + 1);
    } finally {
      await server.destroy();
    }
  });
});

describe('ensureStream', () => {
  it('takes dedupWindowMs, and the deprecated duplicateWindowMs with a warning', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const names = [`TXO_NATS_ENSURE_NEW_${suffix}`, `TXO_NATS_ENSURE_OLD_${suffix}`];
    try {
      const made = await ensureStream(nc, {
        name: names[0]!,
        subjects: [`${ROOT}-ensure-new.>`],
        dedupWindowMs: 45_000,
      });
      expect(made.config.duplicate_window).toBe(nanos(45_000));
      expect(warn).not.toHaveBeenCalled();
      const old = await ensureStream(NATS_URL, {
        name: names[1]!,
        subjects: [`${ROOT}-ensure-old.>`],
        duplicateWindowMs: 50_000,
      });
      expect(old.config.duplicate_window).toBe(nanos(50_000));
      expect(String(warn.mock.calls[0]![0])).toMatch(
        /^ensureStream: option `duplicateWindowMs` is deprecated, use `dedupWindowMs`/,
      );
    } finally {
      warn.mockRestore();
      for (const name of names) await jsm.streams.delete(name).catch(() => false);
    }
  });
});
