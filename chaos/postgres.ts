/**
 * The chaos run's private PostgreSQL cluster: the tests' private cluster
 * (test/helpers/private-postgres.ts: initdb on a free port in a temp dir, run as the `postgres` OS
 * user when we are root, restarted fast or immediate on purpose, removed at the end), with the
 * chaos run's settings.
 */
export { PrivatePostgres } from '../test/helpers/private-postgres.js';

/**
 * fsync off: the faults are process crashes, never an OS crash, so the page cache keeps
 * everything an immediate shutdown leaves behind; it spares the shared disk.
 */
export const CHAOS_POSTGRES_SETTINGS: Readonly<Record<string, string>> = {
  listen_addresses: '127.0.0.1',
  max_connections: '200',
  fsync: 'off',
  shared_buffers: '128MB',
};

/**
 * The CDC relay's run adds logical decoding, and a bound on what the slot may retain (as
 * docs/cdc.md asks of any deployment): a lost slot would be a finding, never a full disk.
 */
export const CHAOS_CDC_POSTGRES_SETTINGS: Readonly<Record<string, string>> = {
  ...CHAOS_POSTGRES_SETTINGS,
  wal_level: 'logical',
  max_slot_wal_keep_size: '4GB',
};
