/**
 * The handover statement's second line of defence. `decodeWalEvent` refuses what `enqueue` would
 * have refused, but PostgreSQL has rules of its own no cheap check can promise (a JSON number
 * numeric cannot hold, a nesting deeper than the server's stack): a handover statement that fails
 * with a data error would fail again after every reconnect, stall the slot and re-publish all
 * that streamed since. Instead the batch is written again row by row inside one transaction (one
 * id, one marker: the stream still skips it as the relay's own), each row under a savepoint, and a
 * row PostgreSQL refuses goes in as a dead `tx-outbox.undecodable` row: its payload as bytes, no
 * names of its own (they may be what was refused), the reason without pg's `detail` and `where`
 * (they quote the payload).
 */
import type { PoolClient } from 'pg';
import type { Logger } from '../logger.js';
import { uncarriedCharacter } from '../producer/text.js';
import { redactText } from '../redact.js';
import { type Failure, MAX_ERROR_CHARS } from '../relay/verdicts.js';
import type { HandoverRow, ProgressRow } from './handover-rows.js';
import { UNDECODABLE_TYPE } from './stream-batch.js';

/**
 * The SQLSTATEs of a statement refused for its data, not for the server's state: class 22 (data
 * exception: invalid text, JSON, encoding, numeric overflow), 23502/23514 (not null, check) and
 * 54001 (a JSON nested past the server's stack depth).
 */
export function isDataError(error: unknown): error is Error & { code: string } {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  return code.startsWith('22') || code === '23502' || code === '23514' || code === '54001';
}

/** The SQLSTATE and message of a data error: never its `detail` or `where`. */
export function dataErrorText(error: Error & { code: string }): string {
  return `${error.message.slice(0, 200)} (SQLSTATE ${error.code})`;
}

/** A name as it may appear in a reason: characters no transport carries (NUL …) as `?`. */
export function sanitisedName(name: string): string {
  let out = name.slice(0, 100);
  for (let bad = uncarriedCharacter(out); bad !== undefined; bad = uncarriedCharacter(out))
    out = `${out.slice(0, bad.index)}?${out.slice(bad.index + (out.codePointAt(bad.index)! > 0xffff ? 2 : 1))}`;
  return out;
}

/** The row that keeps an event PostgreSQL refused: dead, under the undecodable aggregate of its LSN. */
export function refusedRow(row: HandoverRow, error: Error & { code: string }): HandoverRow {
  const e = row.event;
  const w = e.wal!;
  const lsn = e.message.id.startsWith('wal:') ? e.message.id.slice(4) : e.message.id;
  const reason = redactText(
    `permanent: the handover into the table refused it: ${dataErrorText(error)}; it was ` +
      `${JSON.stringify(sanitisedName(w.aggregateType))}/${JSON.stringify(sanitisedName(w.aggregateId))} ` +
      `sequence ${w.sequence}, type ${JSON.stringify(sanitisedName(w.type))}`,
  ).slice(0, MAX_ERROR_CHARS);
  const failure: Failure = {
    id: e.message.id,
    status: 'dead',
    delayMs: 0,
    error: reason,
    reason: 'permanent',
  };
  return {
    event: {
      ...e,
      undecodable: reason,
      wal: {
        ...w,
        aggregateType: UNDECODABLE_TYPE,
        aggregateId: lsn,
        sequence: 1,
        sequenceBase: 0,
        type: UNDECODABLE_TYPE,
        topic: null,
        contentType: 'application/octet-stream',
        headers: {},
        createdAt: Number.isNaN(w.createdAt.getTime()) ? new Date() : w.createdAt,
      },
    },
    failure,
  };
}

/** One handover statement: returns the transaction's id; throws FencedError or the pg error. */
export type HandoverStatement = (
  rows: readonly HandoverRow[],
  progress: readonly ProgressRow[],
) => Promise<string>;

/**
 * Writes a handover whose one-statement form failed with a data error: in one transaction, each
 * aggregate's rows and progress under a savepoint; where that fails, each of its rows alone, and
 * a row refused again as {@link refusedRow} (its aggregate's progress is then left out: the dead
 * row is no longer its head). Returns the transaction's id.
 */
export async function writeIsolated(
  client: PoolClient,
  statement: HandoverStatement,
  rows: readonly HandoverRow[],
  progress: readonly ProgressRow[],
  logger: Logger | undefined,
): Promise<string> {
  const groups = new Map<string, { rows: HandoverRow[]; progress: ProgressRow[] }>();
  const group = (key: string) => {
    let g = groups.get(key);
    if (!g) {
      g = { rows: [], progress: [] };
      groups.set(key, g);
    }
    return g;
  };
  for (const r of rows) group(r.event.key).rows.push(r);
  for (const p of progress) group(p.key).progress.push(p);
  let xid: string | undefined;
  await client.query('BEGIN');
  try {
    for (const g of groups.values()) {
      const attempt = await savepoint(client, () => statement(g.rows, g.progress));
      if (attempt.ok) {
        xid = attempt.xid;
        continue;
      }
      for (const r of g.rows) {
        const alone = await savepoint(client, () => statement([r], []));
        if (alone.ok) {
          xid = alone.xid;
          continue;
        }
        logger?.error(
          { id: r.event.message.id, error: dataErrorText(alone.error) },
          'WAL-mode event refused by PostgreSQL: kept as a dead event (tx-outbox dead list)',
        );
        xid = await statement([refusedRow(r, alone.error)], []);
      }
    }
    xid ??= await statement([], []);
    await client.query('COMMIT');
    return xid;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}

type Attempt = { ok: true; xid: string } | { ok: false; error: Error & { code: string } };

async function savepoint(client: PoolClient, run: () => Promise<string>): Promise<Attempt> {
  await client.query('SAVEPOINT txo_handover_row');
  try {
    const xid = await run();
    await client.query('RELEASE SAVEPOINT txo_handover_row');
    return { ok: true, xid };
  } catch (error) {
    if (!isDataError(error)) throw error;
    await client.query('ROLLBACK TO SAVEPOINT txo_handover_row');
    return { ok: false, error };
  }
}
