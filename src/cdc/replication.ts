// STAND-IN (core): replaced by wire's src/cdc/replication.ts when merged. Reads the slot through
// pg_logical_slot_peek_binary_changes (no replication protocol); confirm() advances the slot.
import pg from 'pg';
import { OutboxError } from '../errors.js';
import type { Logger } from '../logger.js';
import { formatLsn, type Lsn, parseLsn } from './lsn.js';
import { PgoutputDecoder, type PgoutputMessage } from './pgoutput.js';

export interface ReplicationStreamOptions {
  readonly connection: pg.ClientConfig;
  readonly slot: string;
  readonly publication: string;
  readonly startLsn?: Lsn;
  readonly statusIntervalMs?: number;
  readonly silenceTimeoutMs?: number;
  readonly highWaterMark?: number;
  readonly logger?: Logger;
}

export interface StreamChange {
  readonly lsn: Lsn;
  readonly message: PgoutputMessage;
}

export class ReplicationStream {
  #client: pg.Client | undefined;
  #buffer: StreamChange[] = [];
  #emitted: Lsn[] = [];
  #lastPos = 0n;
  #confirmed = 0n;
  #advanced = 0n;
  #serverLsn = 0n;
  #lastReceivedAt = performance.now();
  #failed: Error | undefined;
  #closed = false;
  #chain: Promise<unknown> = Promise.resolve();
  #timer: NodeJS.Timeout | undefined;
  /** Relations stay known across peeks: a peek's first transaction may be one emitted already. */
  readonly #decoder = new PgoutputDecoder();

  constructor(private readonly o: ReplicationStreamOptions) {}

  get confirmed(): Lsn {
    return this.#confirmed;
  }
  get serverLsn(): Lsn {
    return this.#serverLsn;
  }
  get lastReceivedAt(): number {
    return this.#lastReceivedAt;
  }

  async start(): Promise<void> {
    const client = new pg.Client(this.o.connection);
    client.on('error', (e) => {
      this.#failed ??= e;
    });
    await client.connect();
    this.#client = client;
    await client.query(`SET TimeZone = 'UTC'; SET DateStyle = 'ISO'`);
    const { rows } = await client.query<{ active_pid: number | null; confirmed: string | null }>(
      'SELECT active_pid, confirmed_flush_lsn::text AS confirmed FROM pg_replication_slots WHERE slot_name = $1',
      [this.o.slot],
    );
    if (!rows[0]) {
      await client.end().catch(() => undefined);
      throw new OutboxError(`replication slot "${this.o.slot}" does not exist`, { code: 'TXO_CDC_NO_SLOT' });
    }
    if (rows[0].active_pid !== null) {
      await client.end().catch(() => undefined);
      throw new OutboxError(`replication slot "${this.o.slot}" is active for PID ${rows[0].active_pid}`, {
        code: 'TXO_CDC_SLOT_ACTIVE',
      });
    }
    this.#confirmed = rows[0].confirmed ? parseLsn(rows[0].confirmed) : 0n;
    this.#advanced = this.#confirmed;
    this.#timer = setInterval(() => void this.advance(), this.o.statusIntervalMs ?? 1000);
    this.#timer.unref();
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#chain.then(fn, fn);
    this.#chain = next.catch(() => undefined);
    return next;
  }

  private advance(): Promise<void> {
    return this.serial(async () => {
      const client = this.#client;
      if (!client || this.#failed || this.#confirmed <= this.#advanced) return;
      const target = this.#confirmed;
      try {
        await client.query('SELECT pg_replication_slot_advance($1, $2::pg_lsn)', [
          this.o.slot,
          formatLsn(target),
        ]);
        this.#advanced = target;
        this.#emitted = this.#emitted.filter((p) => p > target);
      } catch (e) {
        this.#failed ??= e as Error;
      }
    });
  }

  async next(max: number): Promise<StreamChange[]> {
    for (;;) {
      if (this.#buffer.length > 0) return this.#buffer.splice(0, max);
      if (this.#failed) throw this.#failed;
      if (this.#closed) throw new OutboxError('replication stream closed', { code: 'TXO_CDC_CLOSED' });
      await this.serial(() => this.peek(Math.max(max, 1000)));
      if (this.#buffer.length === 0) await new Promise((r) => setTimeout(r, 50));
    }
  }

  private async peek(max: number): Promise<void> {
    const client = this.#client;
    if (!client || this.#failed || this.#closed) return;
    try {
      const { rows } = await client.query<{ lsn: string; data: Buffer }>(
        `SELECT lsn::text AS lsn, data FROM pg_logical_slot_peek_binary_changes($1, NULL, $2,
           'proto_version', '1', 'publication_names', $3, 'messages', 'true')`,
        [this.o.slot, this.#emitted.length + max, this.o.publication],
      );
      const cur = await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
      this.#serverLsn = parseLsn(cur.rows[0]!.lsn);
      this.#lastReceivedAt = performance.now();
      const decoder = this.#decoder;
      let txn: StreamChange[] | undefined;
      for (const row of rows) {
        const message = decoder.decode(row.data);
        const change = { lsn: parseLsn(row.lsn), message };
        if (message.tag === 'relation') {
          // Relations precede the first insert of their transaction: keep them with it.
          if (txn) txn.push(change);
          continue;
        }
        if (message.tag === 'begin') {
          txn = [change];
          continue;
        }
        if (txn) {
          txn.push(change);
          if (message.tag === 'commit') {
            if (message.endLsn > this.#lastPos) {
              this.#lastPos = message.endLsn;
              this.#emitted.push(message.endLsn);
              this.#buffer.push(...txn);
            }
            txn = undefined;
          }
          continue;
        }
        if (message.tag === 'message' && message.lsn > this.#lastPos) {
          this.#lastPos = message.lsn;
          this.#emitted.push(message.lsn);
          this.#buffer.push(change);
        }
      }
    } catch (e) {
      this.#failed ??= e as Error;
    }
  }

  confirm(lsn: Lsn): void {
    if (lsn > this.#confirmed) this.#confirmed = lsn;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    await this.advance().catch(() => undefined);
    await this.serial(async () => {
      await this.#client?.end().catch(() => undefined);
    });
  }
}
