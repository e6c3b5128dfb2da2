import { describe, expect, it } from 'vitest';
import { AckTracker } from '../../src/cdc/acks.js';
import { Handover } from '../../src/cdc/handover.js';
import type { StreamChange } from '../../src/cdc/replication.js';
import { OwnTransactions, StreamBatcher } from '../../src/cdc/stream-batch.js';
import type { WalMessageReader } from '../../src/cdc/wal-auth.js';

/** These streams carry no WAL-mode event message. */
const NO_WAL: WalMessageReader = {
  read: () => {
    throw new Error('no WAL-mode message expected');
  },
};

const COLUMNS = [
  'id',
  'event_id',
  'partition',
  'aggregate_type',
  'aggregate_id',
  'sequence',
  'event_type',
  'schema_version',
  'topic',
  'payload',
  'payload_bytes',
  'headers',
  'created_at',
  'deliver_after',
  'next_attempt_at',
  'attempts',
  'last_error',
  'status',
  'dead_at',
  'sequence_base',
];

function insert(
  id: number,
  aggregate: string,
  sequence: number,
  extra: { status?: string; attempts?: number; deliverAfter?: string; bytes?: string } = {},
): StreamChange {
  const values = [
    String(id),
    '01a233ef-35da-7320-ae5c-f7b10685b52a',
    '3',
    'order',
    aggregate,
    String(sequence),
    'changed',
    '1',
    null,
    extra.bytes ? null : '{"a": 1}',
    extra.bytes ?? null,
    '{"h": "v"}',
    '2026-12-01 10:00:00.123456+00',
    extra.deliverAfter ?? null,
    '2026-12-01 10:00:00.123456+00',
    String(extra.attempts ?? 0),
    null,
    extra.status ?? 'pending',
    null,
    '0',
  ];
  return {
    lsn: BigInt(100 + id),
    message: { tag: 'insert', relationId: 1, schema: 'outbox', table: 'events', columns: COLUMNS, values },
  };
}

function begin(xid: number, at = '2026-12-01T10:00:01Z'): StreamChange {
  return { lsn: 1n, message: { tag: 'begin', finalLsn: 0n, commitTime: new Date(at), xid } };
}

function commit(endLsn: bigint): StreamChange {
  return { lsn: endLsn, message: { tag: 'commit', commitLsn: endLsn - 8n, endLsn, commitTime: new Date() } };
}

describe('StreamBatcher', () => {
  it('hands out a transaction’s inserts at its commit as messages, and confirms only settled units', () => {
    const tracker = new AckTracker();
    const batcher = new StreamBatcher('outbox', 'tx-outbox:outbox', tracker, new OwnTransactions(), NO_WAL);
    expect(batcher.add([begin(7), insert(1, 'a', 1), insert(2, 'b', 1)])).toEqual([]);
    const events = batcher.add([
      commit(500n),
      begin(8),
      insert(3, 'a', 2, { bytes: '\\x0102' }),
      commit(600n),
    ]);
    expect(events.map((e) => [e.message.id, e.key, e.message.sequence, e.publishable])).toEqual([
      ['1', 'order\u001fa', 1, true],
      ['2', 'order\u001fb', 1, true],
      ['3', 'order\u001fa', 2, true],
    ]);
    expect(events[0]!.message.payload.toString()).toBe('{"a": 1}');
    expect(events[0]!.message.headers).toEqual({ h: 'v' });
    expect(events[0]!.message.createdAt.toISOString()).toBe('2026-12-01T10:00:00.123Z');
    expect(Buffer.from(events[2]!.message.payload)).toEqual(Buffer.from([1, 2]));
    expect(tracker.confirmable()).toBeUndefined();
    tracker.settle(events[2]!.unit);
    expect(tracker.confirmable()).toBeUndefined();
    tracker.settle(events[0]!.unit);
    tracker.settle(events[1]!.unit);
    expect(tracker.confirmable()).toBe(600n);
  });

  it('leaves to the polling path what is not the stream’s: retried, dead, or scheduled past the commit', () => {
    const batcher = new StreamBatcher(
      'outbox',
      'tx-outbox:outbox',
      new AckTracker(),
      new OwnTransactions(),
      NO_WAL,
    );
    const events = batcher.add([
      begin(9, '2026-12-01T10:00:01Z'),
      insert(1, 'a', 1, { attempts: 1 }),
      insert(2, 'b', 1, { status: 'dead' }),
      insert(3, 'c', 1, { deliverAfter: '2026-12-01 10:00:02+00' }),
      insert(4, 'd', 1, { deliverAfter: '2026-12-01 10:00:00+00' }),
      commit(700n),
    ]);
    expect(events.map((e) => e.publishable)).toEqual([false, false, false, true]);
  });

  it('settles at once the relay’s own handover transactions, other tables, and non-transactional messages', () => {
    const tracker = new AckTracker();
    const own = new OwnTransactions();
    own.add(String(2n ** 32n + 11n));
    const batcher = new StreamBatcher('outbox', 'tx-outbox:outbox', tracker, own, NO_WAL);
    const other: StreamChange = {
      lsn: 5n,
      message: { tag: 'insert', relationId: 2, schema: 'app', table: 'events', columns: COLUMNS, values: [] },
    };
    const heartbeat: StreamChange = {
      lsn: 900n,
      message: {
        tag: 'message',
        transactional: false,
        lsn: 900n,
        prefix: 'tx-outbox:outbox:heartbeat',
        content: Buffer.alloc(0),
      },
    };
    const marker: StreamChange = {
      lsn: 860n,
      message: {
        tag: 'message',
        transactional: true,
        lsn: 860n,
        prefix: 'tx-outbox:outbox:handover',
        // pg_current_xact_id() of transaction 13 (epoch 1): the marker names its own transaction.
        content: Buffer.from(String((1n << 32n) | 13n)),
      },
    };
    const changes = [begin(11), insert(1, 'a', 1), commit(800n), begin(12), other, commit(850n)];
    changes.push(begin(13), insert(2, 'b', 1), marker, commit(870n), heartbeat);
    expect(batcher.add(changes)).toEqual([]);
    expect(tracker.confirmable()).toBe(900n);
  });
});

describe('Handover', () => {
  it('skips table-mode events the table has, but never a WAL-mode event P did not deliver', () => {
    const h = new Handover('"outbox"', '');
    h.enter('k', 5);
    expect(h.isPolled('k')).toBe(true);
    expect(h.skips('k', 5, 'table')).toBe(true);
    expect(h.skips('k', 6, 'table')).toBe(false);
    expect(h.skips('k', 3, 'wal')).toBe(false);
    h.deliveredByPoll('k', 4);
    expect(h.skips('k', 4, 'wal')).toBe(true);
    // P's deliveries are remembered for aggregates not polled any more, too.
    h.deliveredByPoll('j', 2);
    expect(h.skips('j', 2, 'table')).toBe(true);
    expect(h.skips('j', 3, 'table')).toBe(false);
  });

  it('claims polled aggregates 5,000 at a time, round-robin, each up to what was handed over', () => {
    const h = new Handover('"outbox"', '');
    for (let i = 0; i < 12_000; i++) {
      h.enter(`k${i}`, 3);
      h.claimableUpTo(`k${i}`, 2);
    }
    h.enter('not-yet', 1);
    const seen = new Set<string>();
    for (let round = 0; round < 3; round++) for (const k of Object.keys(h.claimScope())) seen.add(k);
    expect(seen.size).toBe(12_000);
    const scope = h.claimScope();
    expect(Object.keys(scope)).toHaveLength(5000);
    expect(new Set(Object.values(scope))).toEqual(new Set([2]));
  });
});
