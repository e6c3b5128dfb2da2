/**
 * The CDC relay's reading of a WAL-mode message (src/cdc/wal-auth.ts): published only when its MAC
 * verifies and it passes enqueue's checks; refused (counted, logged rate-limited, never stored)
 * when it is not authenticated or is format 1 written after the key; kept dead when authenticated
 * but not an event enqueue writes. The HMAC itself is checked against PostgreSQL's statement in
 * test/integration/enqueue-wal.test.ts.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { WalKey, WalReader, type WalReading, WalRefusals } from '../../src/cdc/wal-auth.js';
import type { PreparedEvent } from '../../src/producer/event.js';
import { partitionOf } from '../../src/producer/partition-of.js';
import { encodeWalBody, WAL_HEADER_BYTES } from '../../src/producer/wal-message.js';
import { logRecorder } from '../helpers/log-recorder.js';

const IPAD = randomBytes(64);
const KEY = new WalKey(IPAD, 1000n);
const PARTITIONS = 16;

interface Over extends Partial<PreparedEvent> {
  readonly version?: number;
  readonly seq?: number;
  readonly base?: number;
  readonly partition?: number;
  readonly caller?: boolean;
}

/** A message's content before its MAC, as the statement and the client write it. */
function data(over: Over = {}): Buffer {
  const e: PreparedEvent = {
    eventId: randomUUID(),
    aggregateType: 'order',
    aggregateId: 'o-1',
    type: 'changed',
    schemaVersion: 1,
    topic: null,
    payloadJson: '{"x":1}',
    payloadBytes: null,
    headers: '{}',
    deliverAfter: null,
    sequence: over.caller ? (over.seq ?? 1) : null,
    bytes: 0,
    ...over,
  };
  const head = Buffer.alloc(WAL_HEADER_BYTES);
  head.writeUInt8(over.version ?? 2, 0);
  head.writeBigInt64BE(BigInt(over.seq ?? 1), 1);
  head.writeBigInt64BE(BigInt(over.base ?? 0), 9);
  head.writeInt16BE(over.partition ?? partitionOf(e.aggregateType, e.aggregateId, PARTITIONS)!, 17);
  head.writeBigInt64BE(1_767_225_600_000_000n, 19);
  return Buffer.concat([head, encodeWalBody(e)]);
}

/** HMAC-SHA256 as the producer's statement computes it: sha256(opad || sha256(ipad || m)). */
function statementMac(m: Buffer): Buffer {
  const opad = Buffer.from(IPAD.map((b) => b ^ 0x36 ^ 0x5c));
  const inner = createHash('sha256').update(IPAD).update(m).digest();
  return createHash('sha256').update(opad).update(inner).digest();
}

function signed(d: Buffer): Buffer {
  return Buffer.concat([d, KEY.mac(d)]);
}

function setup(acceptFormat1 = false, now: () => number = Date.now) {
  const log = logRecorder();
  const counted: string[] = [];
  const refusals = new WalRefusals(
    log.logger,
    { relayId: 'r1' },
    { inc: (l) => counted.push(l!['reason']!) },
    now,
  );
  const reader = new WalReader(KEY, { partitions: PARTITIONS, utf8: true }, acceptFormat1, refusals);
  return { reader, refusals, log, counted };
}

function kind(r: WalReading): string {
  return r.kind === 'refused' ? `refused:${r.reason}` : r.kind;
}

describe('WalKey', () => {
  it("computes HMAC-SHA256 exactly as the statement's sha256(opad || sha256(ipad || m))", () => {
    const m = data();
    expect(KEY.mac(m)).toEqual(statementMac(m));
    expect(KEY.verify(signed(m))).toBe(true);
  });

  it('never shows the key in JSON', () => {
    expect(JSON.stringify({ key: KEY })).toBe('{"key":"WalKey(created 0/3E8)"}');
    expect(JSON.stringify(KEY)).not.toContain(IPAD.toString('hex').slice(0, 16));
  });
});

describe('WalReader', () => {
  it('publishes an authenticated event enqueue would write', () => {
    const { reader, refusals } = setup();
    const r = reader.read(signed(data({ seq: 4 })), 5000n, true);
    expect(r.kind).toBe('event');
    expect(r.kind === 'event' && [r.event.aggregateId, r.event.sequence, r.event.payload.toString()]).toEqual(
      ['o-1', 4, '{"x":1}'],
    );
    expect(refusals.total).toBe(0);
  });

  it('refuses what does not verify: a made-up MAC, one bit changed, another key, no MAC, empty', () => {
    const { reader, refusals, counted } = setup();
    const good = signed(data());
    const flipped = Buffer.from(good);
    flipped[30]! ^= 1;
    const otherKey = new WalKey(randomBytes(64), 0n);
    for (const content of [
      Buffer.concat([data(), randomBytes(32)]),
      flipped,
      Buffer.concat([data(), otherKey.mac(data())]),
      data(),
      Buffer.alloc(0),
      Buffer.from([2]),
      randomBytes(40),
    ]) {
      expect(kind(reader.read(content, 5000n, true))).toBe('refused:unauthenticated');
    }
    expect(kind(reader.read(Buffer.concat([data(), randomBytes(32)]), 5000n, false))).toBe(
      'refused:unauthenticated',
    );
    expect(refusals.counts).toEqual({ unauthenticated: 8, format_1: 0, invalid: 0 });
    expect(counted).toHaveLength(8);
  });

  it('keeps dead (never publishes) what verifies but is not what enqueue writes', () => {
    const { reader, refusals } = setup();
    const dead = (over: Over, transactional = true): string => {
      const r = reader.read(signed(data(over)), 5000n, transactional);
      if (r.kind !== 'dead') throw new Error(`not dead: ${r.kind}`);
      expect(r.content.length).toBe(data(over).length); // stored without its MAC
      return r.problem;
    };
    expect(dead({ partition: 999 })).toMatch(/partition of 999, where partition_of gives \d+ of 16/);
    expect(dead({ partition: -1 })).toMatch(/partition of -1/);
    expect(dead({ seq: 3, base: 5 })).toMatch(/sequence_base of 5, not below its sequence 3/);
    expect(dead({ seq: 5, base: 5 })).toMatch(/sequence_base of 5/);
    expect(dead({ seq: 0 })).toMatch(/sequence of 0/);
    expect(dead({ caller: true, seq: 7, base: 2 })).toMatch(
      /caller's version \(7\) with a sequence_base of 2/,
    );
    expect(dead({ payloadJson: `${'['.repeat(1001)}${']'.repeat(1001)}` })).toMatch(
      /nested more than 1000 levels deep/,
    );
    expect(dead({ aggregateType: 'ord\u0000er' })).toMatch(/aggregate_type: contains U\+0000/);
    expect(dead({ version: 3 })).toMatch(/format version 3/);
    expect(dead({}, false)).toMatch(/not transactional/);
    expect(refusals.total).toBe(0);
    // 1000 levels deep is what enqueue takes.
    const deep = reader.read(
      signed(data({ payloadJson: `${'['.repeat(1000)}${']'.repeat(1000)}` })),
      5000n,
      true,
    );
    expect(deep.kind).toBe('event');
  });

  it('format 1 (no MAC): read before the key existed, refused after it unless acceptWalFormat1', () => {
    const { reader, refusals } = setup();
    expect(kind(reader.read(data({ version: 1 }), 999n, true))).toBe('event');
    expect(kind(reader.read(data({ version: 1, partition: 999 }), 999n, true))).toBe('dead');
    expect(kind(reader.read(data({ version: 1 }), 1000n, true))).toBe('refused:format_1');
    expect(kind(reader.read(data({ version: 1 }), 5000n, false))).toBe('refused:format_1');
    expect(refusals.counts.format_1).toBe(2);
    const accepting = setup(true);
    expect(kind(accepting.reader.read(data({ version: 1 }), 5000n, true))).toBe('event');
    expect(accepting.refusals.total).toBe(0);
  });

  it('logs the first refusal of each reason at once, then at most one line per reason every 10 s', () => {
    let now = 0;
    const { reader, log } = setup(false, () => now);
    const forged = Buffer.concat([data({ payloadJson: '{"s":"hunter2"}' }), randomBytes(32)]);
    for (let i = 0; i < 100; i++) reader.read(forged, 5000n + BigInt(i), true);
    reader.read(data({ version: 1 }), 6000n, true);
    expect(log.lines.map((l) => [l.level, l.obj['reason'], l.obj['refused']])).toEqual([
      ['warn', 'unauthenticated', 1],
      ['warn', 'format_1', 1],
    ]);
    now = 10_000;
    reader.read(forged, 7000n, true);
    expect(log.lines.at(-1)!.obj).toMatchObject({
      reason: 'unauthenticated',
      refused: 100,
      lsn: '0/1B58',
      relayId: 'r1',
    });
    expect(log.lines.at(-1)!.msg).toMatch(/^WAL-mode message refused: its MAC does not verify/);
    expect(JSON.stringify(log.lines)).not.toContain('hunter2');
  });
});

describe('partitionOf', () => {
  it('is undefined for a non-ASCII key in a database that is not UTF-8, defined for ASCII ones', () => {
    expect(partitionOf('order', 'é', 16, false)).toBeUndefined();
    expect(partitionOf('order', 'e', 16, false)).toBe(partitionOf('order', 'e', 16, true));
  });
});
