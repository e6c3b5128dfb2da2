import type { Pool } from 'pg';
import { OutboxError } from '../errors.js';

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
