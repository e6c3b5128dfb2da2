/**
 * A WAL-mode message is checked at decode with the producer's own rules; the handover marker
 * counts only when it names its own transaction; a non-transactional events message is dead when
 * authenticated, refused when not; the slot check's verdict is kept per database (issue 14,
 * review rev-wal F1–F9).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { AckTracker } from '../../src/cdc/acks.js';
import { dataErrorText, isDataError, sanitisedName } from '../../src/cdc/handover-data-errors.js';
import type { StreamChange } from '../../src/cdc/replication.js';
import { isOwnMarker, OwnTransactions, StreamBatcher, UNDECODABLE_TYPE } from '../../src/cdc/stream-batch.js';
import { WalKey, WalReader, WalRefusals } from '../../src/cdc/wal-auth.js';
import { silentLogger } from '../../src/logger.js';
import type { PreparedEvent } from '../../src/producer/event.js';
import type { SqlExecutor } from '../../src/producer/executor.js';
import { partitionOf } from '../../src/producer/partition-of.js';
import { decodeWalEvent, encodeWalBody, WAL_HEADER_BYTES } from '../../src/producer/wal-message.js';
import { databaseOf, WalSlotGate } from '../../src/producer/wal-slot.js';

const KEY = new WalKey(randomBytes(64), 0n);
const PARTITIONS = 16;

/** The relay's reader of a stream with KEY and 16 partitions. */
function reader(): WalReader {
  return new WalReader(
    KEY,
    { partitions: PARTITIONS, utf8: true },
    false,
    new WalRefusals(silentLogger, {}, undefined),
  );
}

/**
 * A message content as a holder of the producer's rights (KEY) who bypasses `enqueue` could write
 * it, in format 2: `tail` goes after the body, before the MAC.
 */
function content(
  over: Partial<PreparedEvent> & { sequence?: number } = {},
  tail: Buffer = Buffer.alloc(0),
): Buffer {
  const e: PreparedEvent = {
    eventId: randomUUID(),
    aggregateType: 'order',
    aggregateId: 'a1',
    type: 'changed',
    schemaVersion: 1,
    topic: null,
    payloadJson: '{"x":1}',
    payloadBytes: null,
    headers: '{}',
    deliverAfter: null,
    sequence: null,
    bytes: 0,
    ...over,
  };
  const head = Buffer.alloc(WAL_HEADER_BYTES);
  head.writeUInt8(2, 0);
  head.writeBigInt64BE(BigInt(over.sequence ?? 1), 1);
  head.writeBigInt64BE(0n, 9);
  head.writeInt16BE(partitionOf(e.aggregateType, e.aggregateId, PARTITIONS) ?? 0, 17);
  head.writeBigInt64BE(BigInt(Date.now()) * 1000n, 19);
  const data = Buffer.concat([head, encodeWalBody(e), tail]);
  return Buffer.concat([data, KEY.mac(data)]);
}

function refusal(c: Buffer): string {
  try {
    decodeWalEvent(c);
  } catch (error) {
    expect((error as { code?: string }).code).toBe('TXO_CDC_BAD_MESSAGE');
    return (error as Error).message;
  }
  throw new Error('decoded');
}

describe('decodeWalEvent: the producer rules (F2, F3, F5)', () => {
  it('decodes what enqueue writes, headers and JSON intact', () => {
    const e = decodeWalEvent(
      content({
        headers: '{"x-a":"1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}',
        payloadJson: '{"a":"é\\u2028😀","n":[1,2.5e10]}',
      }),
    );
    expect(e.headers).toEqual({
      'x-a': '1',
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    });
    expect(e.payload.toString()).toBe('{"a":"é\\u2028😀","n":[1,2.5e10]}');
  });

  it('refuses names enqueue refuses: NUL, control characters, U+FFFD, a bad topic', () => {
    expect(refusal(content({ aggregateType: 'ord\u0000er' }))).toMatch(/aggregate_type: contains U\+0000/);
    expect(refusal(content({ aggregateId: 'a\nb' }))).toMatch(/aggregate_id: contains U\+000A/);
    expect(refusal(content({ type: 'x\u0000' }))).toMatch(/event_type/);
    expect(refusal(content({ topic: 'a.*' }))).toMatch(/topic: .* wildcard/);
    expect(refusal(content({ aggregateType: 'has space', type: 'x' }))).toMatch(/default topic/);
    expect(refusal(content({ type: 'tx-outbox.skipped' }))).toMatch(/tx-outbox's own prefix/);
    // Invalid UTF-8 in a name reads as U+FFFD, which enqueue refuses.
    const c = content({ aggregateId: 'ab' });
    const at = c.indexOf(Buffer.from('ab'));
    c[at] = 0xff; // the MAC no longer verifies: decodeWalEvent does not look
    expect(refusal(c)).toMatch(/aggregate_id: contains U\+FFFD/);
  });

  it('refuses headers that are not an object of valid names and string values', () => {
    expect(refusal(content({ headers: '{"x-a":{"nested":[1,2]}}' }))).toMatch(
      /headers\["x-a"\]: is a object/,
    );
    expect(refusal(content({ headers: '{"x-b":7}' }))).toMatch(/is a number/);
    expect(refusal(content({ headers: 'null' }))).toMatch(/not a JSON object \(null\)/);
    expect(refusal(content({ headers: '[1]' }))).toMatch(/not a JSON object \(an array\)/);
    expect(refusal(content({ headers: '{"ce-id":"x"}' }))).toMatch(/starts with 'ce-'/);
    expect(refusal(content({ headers: '{"x-a":"a\\r\\nb"}' }))).toMatch(/headers\["x-a"\]/);
    expect(refusal(content({ headers: '{nope' }))).toMatch(/headers that are not valid JSON/);
  });

  it('refuses a JSON payload jsonb would refuse, and quotes none of it', () => {
    const secret = 'hunter2-secret';
    for (const payloadJson of [
      `not json ${secret}`,
      `{"a":"${secret}\\u0000"}`,
      `{"a":"\\ud800${secret}"}`,
      `{"${secret}"`,
    ]) {
      const message = refusal(content({ payloadJson }));
      expect(message).toMatch(/JSON payload that (is not valid JSON|holds a \\u0000 or surrogate escape)/);
      expect(message).not.toContain(secret);
    }
    const bad = content({ payloadJson: '"' }, Buffer.from([0xc3, 0x28, 0x22]));
    expect(refusal(bad)).toMatch(/not UTF-8/);
    // Bytes payloads are not looked at.
    expect(decodeWalEvent(content({ payloadBytes: Buffer.from([0, 0xff]) })).payload).toEqual(
      Buffer.from([0, 0xff]),
    );
  });

  it('refuses a sequence or schema version below 1', () => {
    expect(refusal(content({ sequence: 0 }))).toMatch(/sequence of 0/);
    expect(refusal(content({ schemaVersion: 0 }))).toMatch(/schema_version of 0/);
  });
});

function begin(xid: number): StreamChange {
  return { lsn: 1n, message: { tag: 'begin', finalLsn: 10n, commitTime: new Date(), xid } };
}
function commit(endLsn: bigint): StreamChange {
  return { lsn: endLsn, message: { tag: 'commit', commitLsn: endLsn, endLsn, commitTime: new Date() } };
}
function msg(prefix: string, body: Buffer, transactional = true, lsn = 5n): StreamChange {
  return { lsn, message: { tag: 'message', transactional, lsn, prefix, content: body } };
}

describe('StreamBatcher: the handover marker (F1) and non-transactional events (F8)', () => {
  const EVENTS = 'tx-outbox:outbox';
  const MARKER = 'tx-outbox:outbox:handover';
  const xid8 = (xid: number) => Buffer.from(String((7n << 32n) | BigInt(xid)));

  it('a marker counts only with its own xid as content, and never beside an events message', () => {
    const tracker = new AckTracker();
    const batcher = new StreamBatcher('outbox', EVENTS, tracker, new OwnTransactions(), reader());
    // An application's look-alike marker: its WAL-mode event is delivered.
    expect(
      batcher.add([begin(40), msg(EVENTS, content()), msg(MARKER, Buffer.from('audit')), commit(100n)]),
    ).toHaveLength(1);
    // Another transaction's id: not this one's.
    expect(
      batcher.add([begin(41), msg(EVENTS, content()), msg(MARKER, xid8(40)), commit(110n)]),
    ).toHaveLength(1);
    // Its own id, forged beside an events message: still delivered.
    expect(
      batcher.add([begin(42), msg(EVENTS, content()), msg(MARKER, xid8(42)), commit(120n)]),
    ).toHaveLength(1);
    expect(
      batcher.add([begin(43), msg(MARKER, xid8(43)), msg(EVENTS, content()), commit(130n)]),
    ).toHaveLength(1);
    // The relay's own handover (marker with its own id, no events message): skipped.
    expect(batcher.add([begin(44), msg(MARKER, xid8(44)), commit(140n)])).toEqual([]);
    expect(isOwnMarker(Buffer.from(''), 0)).toBe(false);
    expect(isOwnMarker(Buffer.from('44'), 44)).toBe(true);
    expect(isOwnMarker(Buffer.from('-44'), 44)).toBe(false);
  });

  it('a known own xid never hides an events message either', () => {
    const own = new OwnTransactions();
    own.add(String((1n << 32n) | 50n));
    const batcher = new StreamBatcher('outbox', EVENTS, new AckTracker(), own, reader());
    expect(batcher.add([begin(50), msg(EVENTS, content()), commit(100n)])).toHaveLength(1);
  });

  it('an authenticated non-transactional events message becomes an undecodable event of its own unit', () => {
    const tracker = new AckTracker();
    const batcher = new StreamBatcher('outbox', EVENTS, tracker, new OwnTransactions(), reader());
    const out = batcher.add([
      msg(EVENTS, content(), false, 70n),
      msg('tx-outbox:outbox:heartbeat', Buffer.alloc(0), false, 80n),
    ]);
    expect(out).toHaveLength(1);
    expect(out[0]!.undecodable).toMatch(/not transactional/);
    expect(out[0]!.wal!.aggregateType).toBe(UNDECODABLE_TYPE);
    expect(tracker.confirmable()).toBeUndefined(); // not settled yet
    tracker.settle(out[0]!.unit);
    expect(tracker.confirmable()).toBe(80n);
  });

  it('an unauthenticated events message, transactional or not, is no event at all', () => {
    const tracker = new AckTracker();
    const batcher = new StreamBatcher('outbox', EVENTS, tracker, new OwnTransactions(), reader());
    const forged = content();
    forged[forged.length - 1]! ^= 1;
    expect(batcher.add([msg(EVENTS, forged, false, 70n)])).toEqual([]);
    expect(batcher.add([begin(60), msg(EVENTS, forged), msg(EVENTS, Buffer.from('x')), commit(90n)])).toEqual(
      [],
    );
    expect(tracker.confirmable()).toBe(90n); // settled at once
  });
});

describe('the handover data-error path', () => {
  it('knows data errors by SQLSTATE and never gives pg detail or where', () => {
    const e = Object.assign(new Error('invalid input syntax for type json'), {
      code: '22P02',
      detail: 'Token "secret" is invalid.',
      where: 'JSON data, line 1: secret',
    });
    expect(isDataError(e)).toBe(true);
    expect(dataErrorText(e)).toBe('invalid input syntax for type json (SQLSTATE 22P02)');
    for (const code of ['22021', '22003', '23502', '23514', '54001'])
      expect(isDataError({ code })).toBe(true);
    for (const code of ['40001', '57P01', '23505', 'TXO_CDC_FENCED'])
      expect(isDataError({ code })).toBe(false);
    expect(isDataError(new Error('x'))).toBe(false);
  });

  it('sanitises names for a reason', () => {
    expect(sanitisedName('ord\u0000er\n')).toBe('ord?er?');
    expect(sanitisedName('x\uFFFF\uD800y')).toBe('x??y');
  });
});

describe('WalSlotGate: a verdict per database (F9)', () => {
  const ok = {
    wal_level: 'logical',
    exists: true,
    plugin: 'pgoutput',
    slot_type: 'logical',
    here: true,
    wal_status: 'reserved',
  };
  const missing = {
    wal_level: 'logical',
    exists: false,
    plugin: null,
    slot_type: null,
    here: null,
    wal_status: null,
  };

  function handle(database: string | undefined, row: object, count: { n: number }): SqlExecutor {
    return {
      ...(database === undefined ? {} : { connectionParameters: { host: 'h', port: 5432, database } }),
      query: async () => {
        count.n++;
        return { rows: [row] as never[] };
      },
    };
  }

  it("one database's verdict does not answer for another's", async () => {
    const gate = new WalSlotGate(() => 0);
    const a = { n: 0 };
    const b = { n: 0 };
    await gate.check(handle('tenant_a', ok, a), 's', 'txo_s', false);
    await gate.check(handle('tenant_a', ok, a), 's', 'txo_s', false);
    expect(a.n).toBe(1);
    await expect(gate.check(handle('tenant_b', missing, b), 's', 'txo_s', false)).rejects.toMatchObject({
      code: 'TXO_CDC_NO_SLOT',
    });
    expect(b.n).toBe(1);
  });

  it('a handle that cannot tell its database is checked on every call', async () => {
    const gate = new WalSlotGate(() => 0);
    const c = { n: 0 };
    for (let i = 0; i < 3; i++) await gate.check(handle(undefined, ok, c), 's', 'txo_s', false);
    expect(c.n).toBe(3);
    expect(databaseOf({ connectionParameters: { host: 'x', port: 1, database: 'd' } })).toBe('x:1/d');
    expect(databaseOf({ query() {} })).toBeUndefined();
  });
});
