import { describe, expect, it } from 'vitest';
import { formatLsn, parseLsn } from '../../src/cdc/lsn.js';
import { PgoutputDecoder, parseTimestamptz } from '../../src/cdc/pgoutput.js';

/** Builds pgoutput v1 frames byte by byte, as the server writes them. */
class Frame {
  readonly #parts: Buffer[] = [];
  byte(b: number): this {
    this.#parts.push(Buffer.from([b]));
    return this;
  }
  tag(c: string): this {
    return this.byte(c.charCodeAt(0));
  }
  int16(n: number): this {
    const b = Buffer.alloc(2);
    b.writeUInt16BE(n);
    this.#parts.push(b);
    return this;
  }
  int32(n: number): this {
    const b = Buffer.alloc(4);
    b.writeInt32BE(n);
    this.#parts.push(b);
    return this;
  }
  int64(n: bigint): this {
    const b = Buffer.alloc(8);
    b.writeBigInt64BE(n);
    this.#parts.push(b);
    return this;
  }
  cstring(s: string): this {
    this.#parts.push(Buffer.from(s, 'utf8'), Buffer.from([0]));
    return this;
  }
  bytes(b: Buffer): this {
    this.#parts.push(b);
    return this;
  }
  build(): Buffer {
    return Buffer.concat(this.#parts);
  }
}

/** 2026-12-01 23:15:24.123456 UTC as pgoutput's µs since 2000-01-01. */
const COMMIT_MS = Date.UTC(2026, 11, 1, 23, 15, 24, 123);
const COMMIT_US = BigInt(COMMIT_MS - Date.UTC(2000, 0, 1)) * 1000n + 456n;

function relation(id: number, schema: string, table: string, columns: string[]): Buffer {
  const f = new Frame().tag('R').int32(id).cstring(schema).cstring(table).byte(0x64).int16(columns.length);
  for (const [i, c] of columns.entries())
    f.byte(i === 0 ? 1 : 0)
      .cstring(c)
      .int32(25)
      .int32(-1);
  return f.build();
}

describe('pgoutput decoder', () => {
  it('decodes begin and commit with exact LSNs and timestamps', () => {
    const d = new PgoutputDecoder();
    const begin = d.decode(new Frame().tag('B').int64(0x16b374d848n).int64(COMMIT_US).int32(-2).build());
    expect(begin).toEqual({
      tag: 'begin',
      finalLsn: 0x16b374d848n,
      commitTime: new Date(COMMIT_MS),
      xid: 2 ** 32 - 2,
    });
    const commit = d.decode(
      new Frame().tag('C').byte(0).int64(0x16b374d848n).int64(0x16b374d880n).int64(COMMIT_US).build(),
    );
    expect(commit).toEqual({
      tag: 'commit',
      commitLsn: 0x16b374d848n,
      endLsn: 0x16b374d880n,
      commitTime: new Date(COMMIT_MS),
    });
  });

  it('decodes a relation and an insert against it: NULLs, multibyte text, index-aligned', () => {
    const d = new PgoutputDecoder();
    const columns = ['id', 'payload', 'note', 'deliver_after'];
    expect(d.decode(relation(16384, 'sch_ü', 'events', columns))).toEqual({
      tag: 'relation',
      relationId: 16384,
      schema: 'sch_ü',
      table: 'events',
      columns,
    });
    const text = '{"name":"Zoë 🚀 日本"}';
    const raw = Buffer.from(text, 'utf8');
    const insert = new Frame()
      .tag('I')
      .int32(16384)
      .tag('N')
      .int16(4)
      .tag('t')
      .int32(2)
      .bytes(Buffer.from('42'))
      .tag('t')
      .int32(raw.length)
      .bytes(raw)
      .tag('t')
      .int32(0)
      .tag('n')
      .build();
    expect(d.decode(insert)).toEqual({
      tag: 'insert',
      relationId: 16384,
      schema: 'sch_ü',
      table: 'events',
      columns,
      values: ['42', text, '', null],
    });
  });

  it('refuses an insert into an unknown relation and a value running past the frame', () => {
    const d = new PgoutputDecoder();
    const insert = new Frame().tag('I').int32(7).tag('N').int16(1).tag('n').build();
    expect(() => d.decode(insert)).toThrow(/relation 7/);
    d.decode(relation(7, 's', 't', ['a']));
    const short = new Frame()
      .tag('I')
      .int32(7)
      .tag('N')
      .int16(1)
      .tag('t')
      .int32(10)
      .bytes(Buffer.from('abc'))
      .build();
    expect(() => d.decode(short)).toThrow(/runs past/);
    const binary = new Frame().tag('I').int32(7).tag('N').int16(1).tag('b').int32(1).byte(0).build();
    expect(() => d.decode(binary)).toThrow(/column kind/);
  });

  it('decodes a logical message: content a slice of binary-looking bytes, kept exact', () => {
    const content = Buffer.from([0x00, 0xff, 0x00, 0x74, 0x4e, 0xc3, 0x28, 0x00, 0x01]);
    const frame = new Frame()
      .tag('M')
      .byte(1)
      .int64(0x1_0000_0001n)
      .cstring('tx-outbox:sch')
      .int32(content.length)
      .bytes(content)
      .build();
    const sliced = new PgoutputDecoder().decode(frame);
    expect(sliced).toEqual({
      tag: 'message',
      transactional: true,
      lsn: 0x1_0000_0001n,
      prefix: 'tx-outbox:sch',
      content,
    });
    if (sliced.tag !== 'message') throw new Error('not a message');
    expect(sliced.content.buffer).toBe(frame.buffer); // a view, no copy

    const copied = new PgoutputDecoder({ copyContent: true }).decode(frame);
    if (copied.tag !== 'message') throw new Error('not a message');
    frame.fill(0);
    expect(copied.content).toEqual(content); // survives the reuse of the read buffer
    const empty = new Frame().tag('M').byte(0).int64(5n).cstring('hb').int32(0).build();
    expect(new PgoutputDecoder().decode(empty)).toEqual({
      tag: 'message',
      transactional: false,
      lsn: 5n,
      prefix: 'hb',
      content: Buffer.alloc(0),
    });
  });

  it('recognises origin and type, ignores update/delete/truncate, refuses an unknown kind', () => {
    const d = new PgoutputDecoder();
    expect(d.decode(new Frame().tag('O').int64(1n).cstring('origin').build())).toEqual({ tag: 'origin' });
    expect(d.decode(new Frame().tag('Y').int32(1).cstring('public').cstring('t').build())).toEqual({
      tag: 'type',
    });
    for (const tag of ['U', 'D', 'T'])
      expect(d.decode(new Frame().tag(tag).int32(1).build())).toEqual({ tag: 'ignored' });
    expect(() => d.decode(new Frame().tag('S').build())).toThrow(/0x53/);
  });
});

describe('parseTimestamptz', () => {
  it('parses the ISO text PostgreSQL sends, with any offset', () => {
    expect(parseTimestamptz('2026-12-01 23:15:24.123456+00').getTime()).toBe(COMMIT_MS);
    expect(parseTimestamptz('2026-12-01 23:15:24+00').getTime()).toBe(COMMIT_MS - 123);
    expect(parseTimestamptz('2026-12-02 04:45:24.1+05:30').getTime()).toBe(COMMIT_MS - 23);
    expect(parseTimestamptz('2026-12-01 20:15:24.12-03').getTime()).toBe(COMMIT_MS - 3);
    expect(parseTimestamptz('infinity').getTime()).toBe(8.64e15);
    expect(parseTimestamptz('-infinity').getTime()).toBe(-8.64e15);
    expect(() => parseTimestamptz('yesterday')).toThrow(/timestamptz/);
  });
});

describe('lsn', () => {
  it('round-trips the text form over the full 64-bit range', () => {
    expect(parseLsn('16/B374D848')).toBe(0x16b374d848n);
    expect(formatLsn(0x16b374d848n)).toBe('16/B374D848');
    expect(formatLsn(0n)).toBe('0/0');
    expect(parseLsn('FFFFFFFF/FFFFFFFF')).toBe(2n ** 64n - 1n);
    expect(formatLsn(2n ** 64n - 1n)).toBe('FFFFFFFF/FFFFFFFF');
    expect(() => parseLsn('16-B3')).toThrow(/log sequence number/);
  });
});

describe('decode at an offset', () => {
  it('reads a message inside a larger frame (the XLogData payload at 25) without slicing it first', () => {
    const d = new PgoutputDecoder();
    const header = Buffer.alloc(25, 0xaa);
    d.decode(Buffer.concat([header, relation(9, 's', 't', ['a', 'b'])]), 25);
    const insert = new Frame()
      .tag('I')
      .int32(9)
      .tag('N')
      .int16(2)
      .tag('n')
      .tag('t')
      .int32(2)
      .bytes(Buffer.from('hi'));
    expect(d.decode(Buffer.concat([header, insert.build()]), 25)).toMatchObject({
      tag: 'insert',
      values: [null, 'hi'],
    });
    const message = new Frame().tag('M').byte(0).int64(7n).cstring('p').int32(1).byte(0x2a).build();
    expect(d.decode(Buffer.concat([header, message]), 25)).toMatchObject({
      prefix: 'p',
      content: Buffer.from([0x2a]),
    });
    const begin = new Frame().tag('B').int64(3n).int64(COMMIT_US).int32(11).build();
    expect(d.decode(Buffer.concat([header, begin]), 25)).toMatchObject({
      tag: 'begin',
      finalLsn: 3n,
      xid: 11,
    });
  });
});
