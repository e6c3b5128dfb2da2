/**
 * Operator input that PostgreSQL would refuse with a raw error (bigint or interval overflow), or
 * that would be accepted and then be wrong (an empty relay id): refused at the door with an
 * OutboxValidationError naming the field, before any statement runs (the pool never connects).
 */
import pg from 'pg';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { OutboxValidationError } from '../../src/errors.js';
import { pruneInbox, releaseQuarantined, showQuarantined } from '../../src/inbox/quarantine.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import { RecordingPublisher } from '../helpers/memory-publisher.js';

// Nothing listens here: a call that got past its checks would fail to connect, not pass.
const pool = new pg.Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/none', max: 4 });
afterAll(() => pool.end());

describe('operator input beyond what the database takes', () => {
  it('a quarantine id beyond bigint is not a quarantine id', async () => {
    for (const id of ['9223372036854775808', '99999999999999999999', '0']) {
      await expect(showQuarantined(pool, { id })).rejects.toThrow(OutboxValidationError);
      await expect(releaseQuarantined(pool, { ids: ['1', id], reason: 'r' })).rejects.toThrow(
        /^ids: must be quarantine ids/,
      );
    }
  });

  it('pruneInbox still takes the deprecated `olderThanMs` as `dedupRetentionMs`, warning once', async () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      await expect(pruneInbox(pool, { olderThanMs: 1e20, replayHorizonMs: 86_400_000 })).rejects.toThrow(
        /^dedupRetentionMs: is 100000000000000000000\./,
      );
      expect(String(warn.mock.calls[0]![0])).toMatch(
        /^pruneInbox: option `olderThanMs` is deprecated, use `dedupRetentionMs`/,
      );
      await expect(
        pruneInbox(pool, { olderThanMs: 1, dedupRetentionMs: 1, replayHorizonMs: 1 } as never),
      ).rejects.toThrow(/^olderThanMs: is the deprecated spelling of `dedupRetentionMs`/);
    } finally {
      warn.mockRestore();
    }
  });

  it('a prune window beyond 100 years names its field', async () => {
    await expect(pruneInbox(pool, { dedupRetentionMs: 1e20, replayHorizonMs: 86_400_000 })).rejects.toThrow(
      /^dedupRetentionMs: is 100000000000000000000\. .*up to 3153600000000/,
    );
    await expect(pruneInbox(pool, { dedupRetentionMs: Infinity, replayHorizonMs: 1e19 })).rejects.toThrow(
      /^dedupRetentionMs: is Infinity/,
    );
    await expect(pruneInbox(pool, { dedupRetentionMs: 1000, replayHorizonMs: 1e19 })).rejects.toThrow(
      /^replayHorizonMs: is 10000000000000000000\./,
    );
  });

  it('a prune batch that could never end the loop is refused', async () => {
    for (const batch of [0, -1, 1.5, Number.NaN, 2_000_000]) {
      await expect(
        pruneInbox(pool, { olderThanMs: 86_400_000, replayHorizonMs: 86_400_000, batch }),
      ).rejects.toThrow(/^batch: is .*Pass a whole number of rows from 1 to 1000000/);
    }
  });

  it('an empty or blank relay id is refused', () => {
    for (const relayId of ['', '   ']) {
      expect(() => createRelay({ pool, publisher: new RecordingPublisher(), relayId })).toThrow(
        /^relayId: is "\s*"\. Pass a non-empty id/,
      );
    }
  });
});
