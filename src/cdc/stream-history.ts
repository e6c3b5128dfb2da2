import type { PoolClient } from 'pg';
import type { Fence } from '../core/fence.js';
import { relayStatement, type Statement } from '../relay/session.js';
import { FencedError } from './handover-rows.js';
import type { StreamEvent } from './stream-batch.js';
import { WAL_HISTORY_PAYLOADS_SQL, WAL_HISTORY_SQL } from './stream-history-sql.js';

/**
 * The delivery history of WAL-mode events the stream delivered (`history` on): they never enter
 * the events table, so the outcome statement, which writes the history of table rows, does not
 * see them. One fenced statement per settled batch writes their `deliveries` rows, before the
 * slot is confirmed past them. A relay without history makes none of this.
 */
export class WalHistory {
  readonly #statement: Statement;

  constructor(
    schema: string,
    quotedSchema: string,
    private readonly payloads: boolean,
    private readonly publisher: string,
  ) {
    this.#statement = payloads
      ? relayStatement('wal_history_payloads', WAL_HISTORY_PAYLOADS_SQL, schema, quotedSchema)
      : relayStatement('wal_history', WAL_HISTORY_SQL, schema, quotedSchema);
  }

  /**
   * Writes the rows of the WAL-mode events among `delivered` (one statement, only when there are
   * any). Throws {@link FencedError} when another relay took the partitions: the batch is then
   * not settled, and the new owner publishes it again.
   */
  async record(
    client: Pick<PoolClient, 'query'>,
    fence: Fence,
    delivered: readonly StreamEvent[],
  ): Promise<void> {
    const events = delivered.flatMap((e) => (e.via === 'wal' && e.wal !== undefined ? [e.wal] : []));
    if (events.length === 0) return;
    const values: unknown[] = [
      fence.relayId,
      fence.partitions,
      fence.epochs,
      fence.partitions.length,
      events.map((e) => e.eventId),
      events.map((e) => e.partition),
      events.map((e) => e.aggregateType),
      events.map((e) => e.aggregateId),
      events.map((e) => e.sequence),
      events.map((e) => e.type),
      events.map((e) => e.topic),
      events.map((e) => e.createdAt),
      this.publisher,
    ];
    if (this.payloads)
      values.push(
        events.map((e) => e.payload),
        events.map((e) => e.contentType === 'application/json'),
      );
    const { rows } = await client.query<{ ok: boolean }>({ ...this.#statement, values });
    if (!rows[0]?.ok) throw new FencedError();
  }
}
