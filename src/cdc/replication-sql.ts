/** The replication-protocol commands the CDC stream sends (on a `replication=database` connection). */
import { formatLsn, type Lsn } from './lsn.js';

/**
 * START_REPLICATION of a pgoutput slot: protocol version 1, the relay's publication, and logical
 * messages (`messages 'true'`, PostgreSQL 14+), which carry WAL-mode events and heartbeats.
 * Names are validated identifiers (`[a-z_][a-z0-9_]*`), so quoting them needs no escaping.
 */
export function startReplicationSql(slot: string, publication: string, startLsn: Lsn): string {
  return (
    `START_REPLICATION SLOT "${slot}" LOGICAL ${formatLsn(startLsn)} ` +
    `(proto_version '1', publication_names '"${publication}"', messages 'true')`
  );
}
