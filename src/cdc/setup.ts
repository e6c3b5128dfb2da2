// STAND-IN (core): replaced by control's src/cdc/setup.ts when merged.
import type { Pool } from 'pg';
import { OutboxError } from '../errors.js';
import type { Logger } from '../logger.js';

export interface CdcNames {
  readonly slot: string;
  readonly publication: string;
}

export function cdcNames(schema: string, o: { slot?: string; publication?: string } = {}): CdcNames {
  return { slot: o.slot ?? `txo_${schema}`, publication: o.publication ?? `txo_${schema}` };
}

export async function ensureCdcSlot(
  pool: Pool,
  o: { schema: string; slot?: string; publication?: string },
): Promise<CdcNames & { created: boolean }> {
  const names = cdcNames(o.schema, o);
  const pub = await pool.query('SELECT 1 FROM pg_publication WHERE pubname = $1', [names.publication]);
  if (pub.rowCount === 0) {
    await pool
      .query(
        `CREATE PUBLICATION "${names.publication}" FOR TABLE "${o.schema}".events WITH (publish = 'insert')`,
      )
      .catch((e: { code?: string }) => {
        if (e.code !== '42710') throw e;
      });
  }
  const slot = await pool.query('SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [names.slot]);
  let created = false;
  if (slot.rowCount === 0) {
    await pool
      .query(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, [names.slot])
      .then(() => {
        created = true;
      })
      .catch((e: { code?: string }) => {
        if (e.code !== '42710') throw e;
      });
  }
  return { ...names, created };
}

export async function checkCdc(pool: Pool, names: CdcNames, _logger?: Logger): Promise<void> {
  const { rows } = await pool.query<{ wal_level: string }>('SELECT current_setting($1) AS wal_level', [
    'wal_level',
  ]);
  if (rows[0]?.wal_level !== 'logical')
    throw new OutboxError('wal_level is not logical', { code: 'TXO_CDC_WAL_LEVEL' });
  const slot = await pool.query<{ wal_status: string | null; confirmed: string | null }>(
    'SELECT wal_status, confirmed_flush_lsn::text AS confirmed FROM pg_replication_slots WHERE slot_name = $1',
    [names.slot],
  );
  if (slot.rows[0]?.wal_status === 'lost')
    throw new OutboxError(`slot ${names.slot} lost`, { code: 'TXO_CDC_SLOT_LOST' });
}

export async function takeOverSlot(pool: Pool, slot: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const { rows } = await pool.query<{ active_pid: number | null }>(
      'SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1',
      [slot],
    );
    const pid = rows[0]?.active_pid;
    if (pid === null || pid === undefined) return;
    await pool.query('SELECT pg_terminate_backend($1)', [pid]);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function dropCdcSlot(pool: Pool, names: CdcNames): Promise<void> {
  await pool.query(
    'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1',
    [names.slot],
  );
  await pool.query(`DROP PUBLICATION IF EXISTS "${names.publication}"`);
}
