// STAND-IN (core): replaced by control's exclusive mode of PartitionLeases when merged.
import { hostname } from 'node:os';
import type { Pool } from 'pg';
import type { Logger } from '../logger.js';
import { HEARTBEAT_SQL, RELEASE_SQL, RENEW_SQL, UNREGISTER_SQL } from '../relay/lease-sql.js';
import { withSchema } from '../schema/identifiers.js';

const ACQUIRE_ALL_SQL = `
WITH locked AS (
  SELECT partition, owner, lease_until FROM {{schema}}.partitions ORDER BY partition FOR UPDATE
), blocked AS (
  SELECT 1 FROM locked WHERE owner IS NOT NULL AND owner <> $1 AND lease_until > now()
)
UPDATE {{schema}}.partitions p
SET owner = $1, epoch = p.epoch + 1, lease_until = now() + $2 * interval '1 millisecond', sleeping = false
FROM locked l
WHERE p.partition = l.partition AND NOT EXISTS (SELECT 1 FROM blocked)
RETURNING p.partition, p.epoch::text AS epoch`;

export class ExclusiveLeases {
  private readonly owned = new Map<number, string>();
  private chain: Promise<unknown> = Promise.resolve();
  private readonly sql: Record<'heartbeat' | 'renew' | 'release' | 'acquire' | 'unregister', string>;

  constructor(
    private readonly pool: Pool,
    quotedSchema: string,
    readonly relayId: string,
    private readonly leaseMs: number,
    private readonly totalPartitions: () => Promise<number>,
    private readonly logger: Logger,
  ) {
    this.sql = {
      heartbeat: withSchema(HEARTBEAT_SQL, quotedSchema),
      renew: withSchema(RENEW_SQL, quotedSchema),
      release: withSchema(RELEASE_SQL, quotedSchema),
      acquire: withSchema(ACQUIRE_ALL_SQL, quotedSchema),
      unregister: withSchema(UNREGISTER_SQL, quotedSchema),
    };
  }

  snapshot(): { partitions: number[]; epochs: string[] } {
    const entries = [...this.owned.entries()].sort((a, b) => a[0] - b[0]);
    return { partitions: entries.map((e) => e[0]), epochs: entries.map((e) => e[1]) };
  }

  get size(): number {
    return this.owned.size;
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.chain.then(fn, fn);
    this.chain = next.catch(() => undefined);
    return next;
  }

  /** Acquires every partition, or none; resolves to true when it holds them all. */
  rebalance(): Promise<boolean> {
    return this.serial(async () => {
      await this.pool.query(this.sql.heartbeat, [this.relayId, hostname(), process.pid, this.leaseMs]);
      const total = await this.totalPartitions();
      if (this.owned.size === total) return false;
      const { rows } = await this.pool.query<{ partition: number; epoch: string }>(this.sql.acquire, [
        this.relayId,
        this.leaseMs,
      ]);
      this.owned.clear();
      for (const r of rows) this.owned.set(r.partition, r.epoch);
      if (rows.length > 0) this.logger.info({ relayId: this.relayId }, 'acquired every partition');
      return this.owned.size < total;
    });
  }

  renew(): Promise<void> {
    return this.serial(async () => {
      await this.pool.query(this.sql.heartbeat, [this.relayId, hostname(), process.pid, this.leaseMs]);
      if (this.owned.size === 0) return;
      const { partitions, epochs } = this.snapshot();
      const { rows } = await this.pool.query<{ partition: number }>(this.sql.renew, [
        this.relayId,
        partitions,
        epochs,
        this.leaseMs,
      ]);
      if (rows.length < partitions.length) {
        this.logger.warn({ relayId: this.relayId }, 'partition leases lost to another relay');
        this.owned.clear();
      }
    });
  }

  releaseAll(): Promise<void> {
    return this.serial(async () => {
      const { partitions, epochs } = this.snapshot();
      this.owned.clear();
      if (partitions.length > 0) await this.pool.query(this.sql.release, [this.relayId, partitions, epochs]);
      await this.pool.query(this.sql.unregister, [this.relayId]);
    });
  }

  forget(): void {
    this.owned.clear();
  }
}
