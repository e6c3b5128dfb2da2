/**
 * The WAL-mode message format: every field round-trips through the client's body plus a header
 * laid out as the statement writes it (int8send/int2send, big-endian) and, in format 2, the MAC
 * after it (left out, not verified here: src/cdc/wal-auth.ts); another version, unknown flags and
 * a message cut short are refused with TXO_CDC_BAD_MESSAGE.
 */
import { describe, expect, it } from 'vitest';
import { OutboxError } from '../../src/errors.js';
import { type OutboxEvent, prepareEvent } from '../../src/producer/event.js';
import {
  decodeWalEvent,
  encodeWalBody,
  eventsPrefix,
  heartbeatPrefix,
  WAL_FORMAT_VERSION,
  WAL_HEADER_BYTES,
  WAL_MAC_BYTES,
  walContentSql,
} from '../../src/producer/wal-message.js';

const ID = '0190f6a2-7b3c-7def-8123-456789abcdef';

/** The statement's part: version, sequence, sequence_base, partition, created_at µs. */
function header(sequence: bigint, base: bigint, partition: number, micros: bigint, version = 2): Buffer {
  const b = Buffer.alloc(WAL_HEADER_BYTES);
  b.writeUInt8(version, 0);
  b.writeBigInt64BE(sequence, 1);
  b.writeBigInt64BE(base, 9);
  b.writeInt16BE(partition, 17);
  b.writeBigInt64BE(micros, 19);
  return b;
}

function roundTrip(event: OutboxEvent, trace: Record<string, string> = {}) {
  const p = prepareEvent(event, 'event', {
    maxPayloadBytes: 16 * 1024 * 1024,
    newEventId: () => ID,
    traceHeaders: trace,
  });
  // Format 2 ends with its MAC: 32 bytes the decoder leaves out of the payload.
  const content = Buffer.concat([
    header(42n, 7n, 13, 1_767_225_600_123_456n),
    encodeWalBody(p),
    Buffer.alloc(WAL_MAC_BYTES, 0xee),
  ]);
  return decodeWalEvent(content);
}

describe('WAL message', () => {
  it('round-trips every field of a JSON event', () => {
    const e = roundTrip({
      aggregateType: 'order',
      aggregateId: 'o-1',
      type: 'order.created',
      payload: { total: 12.5, lines: [1, 2] },
      topic: 'orders.created',
      headers: { 'x-tenant': 'acme', 'x-b': '' },
      schemaVersion: 3,
      eventId: ID,
    });
    expect(e).toEqual({
      eventId: ID,
      aggregateType: 'order',
      aggregateId: 'o-1',
      sequence: 42,
      sequenceBase: 7,
      partition: 13,
      type: 'order.created',
      schemaVersion: 3,
      topic: 'orders.created',
      payload: Buffer.from('{"total":12.5,"lines":[1,2]}'),
      contentType: 'application/json',
      headers: { 'x-tenant': 'acme', 'x-b': '' },
      createdAt: new Date(1_767_225_600_123),
      callerVersion: false,
    });
  });

  it('round-trips a bytes payload as the same bytes, octet-stream', () => {
    const bytes = Buffer.from([0, 1, 2, 255, 0x7b, 0x22]);
    const e = roundTrip({ aggregateType: 'a', aggregateId: 1n, type: 't', payload: new Uint8Array(bytes) });
    expect(e.contentType).toBe('application/octet-stream');
    expect(Buffer.compare(e.payload, bytes)).toBe(0);
    expect(e.aggregateId).toBe('1');
  });

  it('an empty payload of bytes stays empty; JSON null stays null', () => {
    expect(
      roundTrip({ aggregateType: 'a', aggregateId: 1, type: 't', payload: new Uint8Array() }).payload,
    ).toHaveLength(0);
    expect(
      roundTrip({ aggregateType: 'a', aggregateId: 1, type: 't', payload: null }).payload.toString(),
    ).toBe('null');
  });

  it('empty headers and topic null come back as {} and null', () => {
    const e = roundTrip({ aggregateType: 'a', aggregateId: 'x', type: 't', payload: 1 });
    expect(e.headers).toEqual({});
    expect(e.topic).toBeNull();
    expect(e.schemaVersion).toBe(1);
  });

  it('carries the trace headers enqueue merges in', () => {
    const tp = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const e = roundTrip({ aggregateType: 'a', aggregateId: 'x', type: 't', payload: 1 }, { traceparent: tp });
    expect(e.headers).toEqual({ traceparent: tp });
  });

  it('round-trips unicode in every text field and the payload', () => {
    const e = roundTrip({
      aggregateType: 'commande·été',
      aggregateId: '注文-🚀',
      type: 'créée',
      topic: 'orders.created',
      payload: { name: 'Zoë 🚀 日本' },
    });
    expect(e.aggregateType).toBe('commande·été');
    expect(e.aggregateId).toBe('注文-🚀');
    expect(e.type).toBe('créée');
    expect(JSON.parse(e.payload.toString('utf8'))).toEqual({ name: 'Zoë 🚀 日本' });
  });

  it('round-trips a big payload (4 MiB) as a slice, byte for byte', () => {
    const big = Buffer.alloc(4 * 1024 * 1024);
    for (let i = 0; i < big.length; i++) big[i] = (i * 31) & 0xff;
    const e = roundTrip({ aggregateType: 'a', aggregateId: 'x', type: 't', payload: big });
    expect(e.payload.length).toBe(big.length);
    expect(e.payload.equals(big)).toBe(true);
    const json = { s: 'x'.repeat(3_000_000) };
    expect(roundTrip({ aggregateType: 'a', aggregateId: 'x', type: 't', payload: json }).payload.length).toBe(
      JSON.stringify(json).length,
    );
  });

  it('reads format 1 (no MAC) as tx-outbox before migration 12 wrote it', () => {
    const p = prepareEvent({ aggregateType: 'a', aggregateId: 'x', type: 't', payload: [1, 2] }, 'event', {
      maxPayloadBytes: 1024,
      newEventId: () => ID,
      traceHeaders: {},
    });
    const e = decodeWalEvent(Buffer.concat([header(3n, 0n, 0, 0n, 1), encodeWalBody(p)]));
    expect([e.sequence, e.payload.toString()]).toEqual([3, '[1,2]']);
  });

  it('refuses another format version with a clear error', () => {
    const p = prepareEvent({ aggregateType: 'a', aggregateId: 'x', type: 't', payload: 1 }, 'event', {
      maxPayloadBytes: 1024,
      newEventId: () => ID,
      traceHeaders: {},
    });
    const content = Buffer.concat([header(1n, 0n, 0, 0n, 3), encodeWalBody(p), Buffer.alloc(WAL_MAC_BYTES)]);
    const error = (() => {
      try {
        decodeWalEvent(content);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(OutboxError);
    expect((error as OutboxError).code).toBe('TXO_CDC_BAD_MESSAGE');
    expect((error as Error).message).toMatch(
      /format version 3, newer than the versions this tx-outbox reads \(1 and 2\)/,
    );
  });

  it('does not blame another tx-outbox version for a message in no format of ours', () => {
    for (const garbage of [
      Buffer.from('{"forged":true}'),
      Buffer.from([0x00, 1, 2, 3]),
      Buffer.from('garbage'),
    ]) {
      const error = (() => {
        try {
          decodeWalEvent(garbage);
        } catch (e) {
          return e;
        }
      })();
      expect((error as OutboxError).code).toBe('TXO_CDC_BAD_MESSAGE');
      expect((error as Error).message).toMatch(
        /which is no tx-outbox format version: the message is damaged/,
      );
      expect((error as Error).message).not.toMatch(/tx-outbox version wrote it/);
    }
  });

  it('refuses an empty message, a cut one and unknown flags', () => {
    const p = prepareEvent(
      { aggregateType: 'agg', aggregateId: 'x', type: 't', payload: 1, topic: 'a.b' },
      'event',
      { maxPayloadBytes: 1024, newEventId: () => ID, traceHeaders: {} },
    );
    const full = Buffer.concat([header(1n, 0n, 0, 0n, 1), encodeWalBody(p)]);
    expect(() => decodeWalEvent(Buffer.alloc(0))).toThrow(/is empty/);
    expect(() => decodeWalEvent(full.subarray(0, 10))).toThrow(/cut short in its sequence_base/);
    expect(() => decodeWalEvent(full.subarray(0, WAL_HEADER_BYTES + 20))).toThrow(
      /cut short in its aggregate_type/,
    );
    const flagged = Buffer.from(full);
    flagged[WAL_HEADER_BYTES] = 0x80;
    expect(() => decodeWalEvent(flagged)).toThrow(/unknown flags/);
  });

  it('names the prefixes and the SQL of the header', () => {
    expect(eventsPrefix('outbox')).toBe('tx-outbox:outbox');
    expect(heartbeatPrefix('outbox')).toBe('tx-outbox:outbox:heartbeat');
    expect(WAL_FORMAT_VERSION).toBe(2);
    expect(walContentSql('s', 'b', 'p', '$1')).toMatch(/^'\\x02'::bytea \|\| int8send\(s\)/);
  });
});
