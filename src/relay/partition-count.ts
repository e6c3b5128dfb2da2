import type { Pool } from 'pg';
import { OutboxError } from '../errors.js';
import type { Logger } from '../logger.js';
import { checkHistoryTable } from './history.js';

/**
 * The schema's partition count (fixed when the schema was created), read once per relay. A schema
 * that does not exist is a setup mistake: `TXO_NO_SCHEMA`, naming migrate.
 */
export class PartitionCount {
  #count: number | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly schema: string,
    private readonly quotedSchema: string,
  ) {}

  async get(): Promise<number> {
    if (this.#count === undefined) {
      const { rows } = await this.pool
        .query<{ partitions: number }>(`SELECT partitions FROM ${this.quotedSchema}.config`)
        .catch((error: unknown) => {
          if ((error as { code?: unknown }).code === '42P01') return { rows: [] };
          throw error;
        });
      if (!rows[0]) {
        throw new OutboxError(`no outbox schema "${this.schema}" found; run migrate first`, {
          code: 'TXO_NO_SCHEMA',
        });
      }
      this.#count = rows[0].partitions;
    }
    return this.#count;
  }
}

export interface StartCheckParts {
  readonly partitions: PartitionCount;
  readonly pool: Pool;
  readonly quotedSchema: string;
  /** The relay keeps a delivery history: its table must be there. */
  readonly history: boolean;
  readonly logger: Logger;
  readonly relayId: string;
}

/**
 * What a relay checks before its loop starts: the schema (its partition count) and, with a
 * history, the deliveries table. A missing schema or grant is a setup mistake and throws now; a
 * database that is down is transient: logged, and the loop retries.
 */
export async function checkAtStart(p: StartCheckParts): Promise<void> {
  try {
    await p.partitions.get();
    if (p.history) await checkHistoryTable(p.pool, p.quotedSchema);
  } catch (error) {
    if (error instanceof OutboxError && (error.code === 'TXO_NO_SCHEMA' || error.code === 'TXO_NO_PRIVILEGE'))
      throw error;
    p.logger.warn({ err: error, relayId: p.relayId }, 'database not reachable at start; retrying');
  }
}
