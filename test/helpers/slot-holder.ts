import pg from 'pg';
import { waitFor } from './db.js';
import { DATABASE_URL } from './env.js';

/** A plain replication connection streaming `slot`: what a (stale) CDC relay looks like to PostgreSQL. */
export interface SlotHolder {
  readonly client: pg.Client;
  readonly pid: number;
  /** Settles (with the error) once the walsender is gone. */
  readonly ended: Promise<unknown>;
  close(): Promise<void>;
}

export async function holdSlot(pool: pg.Pool, slot: string, publication: string): Promise<SlotHolder> {
  // pg supports `replication` (a startup parameter) but its ClientConfig type does not list it.
  const config: pg.ClientConfig & { replication: string } = {
    connectionString: DATABASE_URL,
    replication: 'database',
  };
  const client = new pg.Client(config);
  client.on('error', () => undefined);
  await client.connect();
  const ended = client
    .query(
      `START_REPLICATION SLOT "${slot}" LOGICAL 0/0 (proto_version '1', publication_names '${publication}', messages 'true')`,
    )
    .then(
      () => undefined,
      (error: unknown) => error,
    );
  let pid = 0;
  await waitFor(
    async () => {
      const { rows } = await pool.query<{ active_pid: number | null }>(
        'SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1',
        [slot],
      );
      pid = rows[0]?.active_pid ?? 0;
      return pid !== 0;
    },
    { what: `slot ${slot} active`, timeoutMs: 10_000 },
  );
  return {
    client,
    pid,
    ended,
    close: async () => {
      await client.end().catch(() => undefined);
    },
  };
}

/** Drops the slot if it exists, ending whoever streams it first (test cleanup: no abandoned slot). */
export async function dropSlotQuietly(pool: pg.Pool, slot: string): Promise<void> {
  for (let i = 0; i < 50; i++) {
    await pool.query(
      'SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL',
      [slot],
    );
    try {
      await pool.query(
        'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
        [slot],
      );
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
