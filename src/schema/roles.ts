/**
 * Least privilege: the PostgreSQL roles of an outbox schema and the exact grants
 * each needs, derived from the statements the code runs (src/producer,
 * src/relay, src/inbox, src/ops, src/schema/migrate.ts). Five NOLOGIN group
 * roles; login roles become their members (docs/operations.md, Least privilege).
 *
 * - migrator: owns the schema and its tables (DDL); runs `migrate`.
 * - producer: `enqueue` — inserts events, hands out aggregate sequences, reads
 *   whether a partition's relay sleeps (NOTIFY). It cannot read payloads.
 * - relay: claims, publishes and records outcomes; leases and heartbeats.
 * - consumer: the inbox — dedup records, positions, attempts, quarantine.
 * - operator: `status`, `dead list|show|replay|skip`, `inbox list|show|release|prune`.
 *
 * Every runtime role may read `migrations` and `config`, so that `migrate(pool)`
 * on an up-to-date schema succeeds under it. Identity columns need no sequence
 * grant; the sequence floor is read by producers and raised by the pruner (the
 * relay's background pruner, the operator's `prune`). Nothing is needed for
 * LISTEN, NOTIFY or advisory locks.
 */

import { OutboxValidationError } from '../errors.js';
import { quoteSchema } from './identifiers.js';
import { DEFAULT_SCHEMA } from './migrate.js';

export const ROLE_KINDS = ['migrator', 'producer', 'relay', 'consumer', 'operator'] as const;
export type RoleKind = (typeof ROLE_KINDS)[number];
type RuntimeRole = Exclude<RoleKind, 'migrator'>;
const RUNTIME_ROLES: readonly RuntimeRole[] = ['producer', 'relay', 'consumer', 'operator'];

export type RoleNames = Readonly<Record<RoleKind, string>>;

/** Tables beyond the outbox's own that the relay's background pruner may be let delete from. */
export const RELAY_PRUNABLE = ['inbox', 'audit'] as const;
export type RelayPrunable = (typeof RELAY_PRUNABLE)[number];

export interface RolesSqlOptions {
  /** Schema that holds the outbox tables. Default `outbox`. */
  readonly schema?: string;
  /** Role names; each defaults to `<schema>_<kind>`, e.g. `outbox_producer`. */
  readonly roles?: Partial<RoleNames>;
  /**
   * What the relay's background pruner (`createRelay({ prune })`) may delete beyond the outbox's
   * own tables: `'inbox'` (the consumers' dedup records, positions, attempt counts and released
   * quarantine rows: `prune.inbox`), `'audit'` (the operators' audit trail:
   * `prune.auditRetentionMs`). Default none: the relay cannot delete either, and
   * `tx-outbox prune` as the operator keeps them bounded.
   */
  readonly relayPrunes?: readonly RelayPrunable[];
}

export interface RolesSql {
  readonly schema: string;
  readonly roles: RoleNames;
  /**
   * Once, before the first migrate, as a superuser (or a CREATEROLE role that is a member of
   * the migrator role): creates the
   * group roles (if missing) and the schema owned by the migrator (tables of an existing
   * schema are handed to it). Idempotent.
   */
  readonly setup: readonly string[];
  /**
   * After every migrate, as the migrator or a superuser, in one transaction: revokes what
   * the runtime roles had on the schema's tables and grants exactly what they need.
   */
  readonly grants: readonly string[];
  /**
   * Once per database, as a superuser (recommended): `pg_logical_emit_message`, which every login
   * may call by default, revoked from PUBLIC and granted to the producer and relay roles (every
   * overload the server has). The CDC relay refuses a WAL-mode message without the MAC of the
   * schema's key anyway (src/cdc/wal-auth.ts); this keeps other logins from writing logical
   * messages at all. Idempotent.
   */
  readonly walMessages: readonly string[];
}

/** What one role may do on one table: PostgreSQL privilege list, column lists included. */
type TableGrants = Readonly<Record<string, string>>;

const SCHEMA_METADATA: TableGrants = {
  migrations: 'SELECT',
  config: 'SELECT',
};

/** The grants, statement by statement; keep them in step with the SQL they allow. */
const GRANTS: Readonly<Record<RuntimeRole, TableGrants>> = {
  // src/producer/enqueue-sql.ts: INSERT … RETURNING sequence (one) / event_id, sequence (a batch);
  // the sequence update-or-insert and the floor; the sleeping flag of the event's partition.
  producer: {
    ...SCHEMA_METADATA,
    events:
      'INSERT (id, previous_id, event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base, event_type, ' +
      'schema_version, topic, payload, payload_bytes, headers, deliver_after, next_attempt_at), SELECT (event_id, sequence)',
    aggregate_sequences:
      'SELECT, INSERT, UPDATE (last_sequence, written_at, last_id, last_id_sequence, prior_id, batch_ids)',
    partitions: 'SELECT (partition, sleeping)',
    sequence_floor: 'SELECT',
    // src/producer/backpressure-sql.ts (maxPending).
    backlog: 'SELECT',
    // src/producer/enqueue-wal-sql.ts: the key that authenticates WAL-mode events (migration 12).
    wal_key: 'SELECT',
  },
  // src/relay/{claim,outcome,lease,sequence-faults}-sql.ts, relay.ts (partition count); `tx-outbox
  // relay` reads outboxStatus at start. Row locks (FOR UPDATE / FOR SHARE) need the UPDATE grant on
  // partitions. sequence_base: the gap bridge (BRIDGE_GAPS_SQL).
  relay: {
    ...SCHEMA_METADATA,
    // INSERT: the CDC relay hands a failed event and its aggregate's later ones over to the table
    // (src/cdc/handover-sql.ts), the columns it writes.
    events:
      'SELECT, INSERT (event_id, partition, aggregate_type, aggregate_id, sequence, sequence_base, event_type, ' +
      'schema_version, topic, payload, payload_bytes, headers, created_at, next_attempt_at, attempts, last_error, ' +
      'status, dead_at), UPDATE (attempts, status, next_attempt_at, last_error, dead_at, sequence_base), DELETE',
    aggregate_progress: 'SELECT, INSERT, UPDATE (delivered_sequence, blocked_until, delivered_at)',
    partitions: 'SELECT, UPDATE (owner, epoch, lease_until, sleeping)',
    relays: 'SELECT, INSERT, UPDATE (heartbeat_at, lease_ms), DELETE',
    // RECORD_OUTCOME_HISTORY_SQL (delivery history on).
    deliveries: 'INSERT',
    // src/ops/backlog-sql.ts PUBLISH_BACKLOG_SQL (the upsert reads the row it replaces).
    backlog: 'SELECT, INSERT, UPDATE (pending, dead, interval_ms, measured_at)',
    // READ_BACKLOG_SQL; the triggers on events write it for the statement that kills an event
    // (014_dead_counts.sql, with the caller's rights).
    dead_counts: 'SELECT, INSERT, UPDATE (dead)',
    // The CDC relay's slot progress (src/cdc). Its slot statements need the REPLICATION attribute
    // on the login role, which no grant gives (docs/operations.md, CDC).
    cdc_state: 'SELECT, INSERT, UPDATE (relay_id, confirmed_lsn, lag_seconds, measured_at)',
    // src/cdc/wal-auth.ts: the CDC relay verifies WAL-mode events with it.
    wal_key: 'SELECT',
  },
  // src/inbox/inbox-sql.ts.
  consumer: {
    ...SCHEMA_METADATA,
    inbox: 'SELECT, INSERT',
    inbox_positions: 'SELECT, INSERT, UPDATE (last_sequence, previous_sequence, updated_at)',
    inbox_attempts:
      'SELECT, INSERT, UPDATE (attempts, first_at, last_at, last_reason, gap_after, waited_ms), DELETE',
    inbox_quarantine:
      'SELECT, INSERT, UPDATE (reason, attempts, quarantined_at, behind_event_id, released_at, release_reason), DELETE',
  },
  // src/ops/status.ts, src/ops/dead-letter{,-sql}.ts, src/inbox/quarantine.ts. `dead skip` rewrites a
  // dead row into its skip marker (or, --no-publish, deletes it and advances its aggregate);
  // `dead show` reads the audit trail.
  operator: {
    ...SCHEMA_METADATA,
    events:
      'SELECT, UPDATE (status, attempts, next_attempt_at, dead_at, event_type, schema_version, payload, ' +
      'payload_bytes, headers, deliver_after, last_error), DELETE',
    aggregate_progress: 'SELECT, INSERT, UPDATE (delivered_sequence, blocked_until)',
    partitions: 'SELECT',
    relays: 'SELECT',
    backlog: 'SELECT',
    // The triggers on events, for a replay or skip (014_dead_counts.sql).
    dead_counts: 'SELECT, INSERT, UPDATE (dead)',
    // `tx-outbox status` and `cdc status` (src/cdc/setup-sql.ts SLOT_STATUS_SQL).
    cdc_state: 'SELECT',
    audit: 'SELECT, INSERT',
    deliveries: 'SELECT',
    inbox: 'SELECT, DELETE',
    inbox_quarantine: 'SELECT, UPDATE (released_at, release_reason)',
  },
};

/**
 * The delivery history's partition maintenance (src/ops/history.ts): SECURITY DEFINER functions
 * of the migrator's (005_history.sql), so that a relay creates and drops partitions without
 * owning the table. The operator may run it by hand (`tx-outbox history maintain`).
 */
const HISTORY_FUNCTIONS = [
  'history_plan(integer, integer)',
  'history_add_partition(date)',
  'history_drop_partition(date, integer)',
  'history_purge_default(integer)',
];
/**
 * src/producer/enqueue-sql.ts (009_producer.sql), enqueue-wal-sql.ts (012_wal_key.sql): SECURITY
 * INVOKER, so they add no privilege.
 */
const PRODUCER_FUNCTIONS = ['partition_of(text, text)', 'wal_key_missing()'];
/**
 * nextval on the events' id sequence: the producer draws an event's row id in the statement that
 * hands out its sequence (src/producer/enqueue-sql.ts, 015_previous_id.sql). USAGE, not UPDATE:
 * no setval.
 */
const SEQUENCE_GRANTS: Readonly<Record<RuntimeRole, readonly string[]>> = {
  producer: ['events_id_seq'],
  relay: [],
  consumer: [],
  operator: [],
};
const FUNCTION_GRANTS: Readonly<Record<RuntimeRole, readonly string[]>> = {
  producer: PRODUCER_FUNCTIONS,
  relay: HISTORY_FUNCTIONS,
  consumer: [],
  operator: HISTORY_FUNCTIONS,
};
// src/ops/prune-sql.ts (tx-outbox prune as the operator, the relay's background pruner as the
// relay): deletes, the floor's setval, and row locks (FOR UPDATE needs UPDATE on some column).
const PRUNER: TableGrants = {
  aggregate_sequences: 'SELECT, UPDATE (written_at), DELETE',
  aggregate_progress: 'SELECT, UPDATE (blocked_until), DELETE',
  sequence_floor: 'SELECT, UPDATE',
  relays: 'SELECT, UPDATE (heartbeat_at), DELETE',
};
/**
 * The pruner's rights on other parts' records: the operator's always (`tx-outbox prune`), the
 * relay's only when asked (`relayPrunes`): a relay that may not delete the consumers' dedup
 * records or the audit trail cannot lose or hide them.
 */
const PRUNER_OF: Readonly<Record<RelayPrunable, TableGrants>> = {
  inbox: {
    inbox: 'SELECT, DELETE',
    inbox_positions: 'SELECT, UPDATE (updated_at), DELETE',
    inbox_attempts: 'SELECT, UPDATE (last_at), DELETE',
    inbox_quarantine: 'SELECT, UPDATE (released_at), DELETE',
  },
  audit: { audit: 'SELECT, DELETE' },
};

/** The pruner's grants of a role: none for the producer and the consumer. */
function prunerGrants(kind: RuntimeRole, relayPrunes: ReadonlySet<RelayPrunable>): TableGrants {
  if (kind === 'operator') return { ...PRUNER, ...PRUNER_OF.inbox, ...PRUNER_OF.audit };
  if (kind !== 'relay') return {};
  return Object.assign(
    { ...PRUNER },
    ...RELAY_PRUNABLE.filter((t) => relayPrunes.has(t)).map((t) => PRUNER_OF[t]),
  );
}

function relayPrunesOf(value: unknown): ReadonlySet<RelayPrunable> {
  if (value === undefined) return new Set();
  const known: readonly unknown[] = RELAY_PRUNABLE;
  if (!Array.isArray(value) || value.some((t) => !known.includes(t))) {
    throw new OutboxValidationError(
      'relayPrunes',
      `${JSON.stringify(value)} is not a list of ${RELAY_PRUNABLE.map((t) => `'${t}'`).join(' and ')}`,
      "Pass ['inbox'], ['audit'], both, or omit it (the relay then prunes the outbox's own tables only).",
    );
  }
  return new Set(value as RelayPrunable[]);
}

// PostgreSQL identifiers are 63 bytes at most; lowercase, so they need no case-folding rules.
const ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

function roleName(kind: RoleKind, given: string | undefined, schema: string): string {
  const name = given ?? `${schema}_${kind}`;
  if (typeof name !== 'string' || !ROLE_NAME.test(name)) {
    throw new OutboxValidationError(
      `roles.${kind}`,
      `${JSON.stringify(name)} is not a valid role name`,
      `Pass 1-63 characters: lowercase letters, digits, underscores, not starting with a digit${
        given === undefined ? ` (the default <schema>_${kind} is too long for this schema)` : ''
      }.`,
    );
  }
  return name;
}

function ident(name: string): string {
  return `"${name}"`;
}

/** The group roles of an outbox schema and the SQL that creates them and grants their rights. */
export function rolesSql(options: RolesSqlOptions = {}): RolesSql {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteSchema(schemaName);
  const roles = Object.fromEntries(
    ROLE_KINDS.map((kind) => [kind, roleName(kind, options.roles?.[kind], schemaName)]),
  ) as Record<RoleKind, string>;
  const names = ROLE_KINDS.map((kind) => roles[kind]);
  const duplicate = names.find((name, i) => names.indexOf(name) !== i);
  if (duplicate !== undefined) {
    throw new OutboxValidationError(
      'roles',
      `"${duplicate}" is given to two roles`,
      'Give each of migrator, producer, relay, consumer and operator a name of its own.',
    );
  }
  const relayPrunes = relayPrunesOf(options.relayPrunes);
  const migrator = ident(roles.migrator);
  const setup = [
    ...names.map(
      (name) =>
        `DO $$ BEGIN CREATE ROLE ${ident(name)} NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;`,
    ),
    `CREATE SCHEMA IF NOT EXISTS ${schema} AUTHORIZATION ${migrator};`,
    `ALTER SCHEMA ${schema} OWNER TO ${migrator};`,
    `DO $$ DECLARE t text; BEGIN
  FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = '${schemaName}' LOOP
    EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', '${schemaName}', t, '${roles.migrator}');
  END LOOP;
END $$;`,
  ];
  const grants = ['BEGIN;'];
  for (const kind of RUNTIME_ROLES) {
    const role = ident(roles[kind]);
    grants.push(
      `REVOKE ALL ON ALL TABLES IN SCHEMA ${schema} FROM ${role};`,
      `REVOKE ALL ON ALL SEQUENCES IN SCHEMA ${schema} FROM ${role};`,
      `REVOKE ALL ON ALL FUNCTIONS IN SCHEMA ${schema} FROM ${role};`,
      `GRANT USAGE ON SCHEMA ${schema} TO ${role};`,
      ...Object.entries(GRANTS[kind]).map(
        ([table, privileges]) => `GRANT ${privileges} ON ${schema}.${table} TO ${role};`,
      ),
      ...FUNCTION_GRANTS[kind].map((fn) => `GRANT EXECUTE ON FUNCTION ${schema}.${fn} TO ${role};`),
      ...SEQUENCE_GRANTS[kind].map((seq) => `GRANT USAGE ON SEQUENCE ${schema}.${seq} TO ${role};`),
      ...Object.entries(prunerGrants(kind, relayPrunes)).map(
        ([table, privileges]) => `GRANT ${privileges} ON ${schema}.${table} TO ${role};`,
      ),
    );
  }
  grants.push('COMMIT;');
  const walMessages = [
    `DO $$ DECLARE f regprocedure; BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
           WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I, %I', f, '${roles.producer}', '${roles.relay}');
  END LOOP;
END $$;`,
  ];
  return { schema: schemaName, roles, setup, grants, walMessages };
}
