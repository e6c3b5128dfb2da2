/** `tx-outbox roles --print-sql`: the least-privilege group roles of a schema, as SQL to review and run. */

import { type Command, Option } from 'commander';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import {
  RELAY_PRUNABLE,
  type RelayPrunable,
  ROLE_KINDS,
  type RoleKind,
  type RolesSql,
  rolesSql,
} from '../schema/roles.js';
import { packageVersion, usageError } from './common.js';

const SECTIONS = ['all', 'setup', 'grants', 'wal'] as const;
type Section = (typeof SECTIONS)[number];

type RolesCliOptions = {
  readonly printSql?: boolean;
  readonly schema: string;
  readonly section: Section;
  readonly relayPrunes?: string;
} & {
  readonly [kind in RoleKind]?: string;
};

const DUTIES: Readonly<Record<RoleKind, string>> = {
  migrator: 'owns the schema and its tables; runs tx-outbox migrate',
  producer: 'enqueue',
  relay: 'createRelay / tx-outbox relay',
  consumer: 'createInbox and the consumer adapters',
  operator: 'tx-outbox status, dead list|replay, inbox list|show|release|prune',
};

/** Registers `tx-outbox roles --print-sql [--schema S] [--section …] [--relay-prunes T,…] [--<kind> NAME …]`. */
export function registerRoles(program: Command): void {
  const command = program
    .command('roles')
    .description(
      'print the SQL that creates least-privilege group roles (migrator, producer, relay, consumer, ' +
        'operator) for a schema and grants each exactly what it needs',
    )
    .option('--print-sql', 'print the SQL on stdout (it is not run: review it, then run it with psql)')
    .option('--schema <name>', 'schema holding the outbox tables', DEFAULT_SCHEMA)
    .addOption(
      new Option(
        '--section <part>',
        'setup: before the first migrate; grants: after every migrate; wal: who may write logical messages (once per database)',
      )
        .choices(SECTIONS)
        .default('all'),
    )
    .option(
      '--relay-prunes <tables>',
      "let the relay's background pruner delete from these too, comma-separated: inbox (the consumers' " +
        'dedup records, with prune.inbox), audit (the operator audit trail, with prune.auditRetentionMs); ' +
        'default neither',
    );
  for (const kind of ROLE_KINDS) {
    command.option(`--${kind} <name>`, `name of the ${kind} role (default <schema>_${kind})`);
  }
  command.addHelpText(
    'after',
    '\nThe roles are NOLOGIN groups: grant them to your login roles (GRANT outbox_producer TO orders_app).\n' +
      'See docs/operations.md, "Least privilege".',
  );
  command.action((options: RolesCliOptions) => {
    if (!options.printSql) throw usageError('roles only prints SQL: pass --print-sql');
    const roles: Partial<Record<RoleKind, string>> = {};
    for (const kind of ROLE_KINDS) if (options[kind] !== undefined) roles[kind] = options[kind];
    const relayPrunes = relayPrunesFlag(options.relayPrunes);
    process.stdout.write(
      formatRolesSql(rolesSql({ schema: options.schema, roles, relayPrunes }), options.section),
    );
  });
}

/** `--relay-prunes inbox,audit`: the tables named, each known. */
export function relayPrunesFlag(value: string | undefined): RelayPrunable[] {
  if (value === undefined) return [];
  const known: readonly string[] = RELAY_PRUNABLE;
  const tables = value
    .split(',')
    .map((t) => t.trim())
    .filter((t) => t.length > 0);
  const unknown = tables.find((t) => !known.includes(t));
  if (unknown !== undefined || tables.length === 0) {
    throw usageError(
      `--relay-prunes ${JSON.stringify(value)}: ${unknown === undefined ? 'names no table' : `${JSON.stringify(unknown)} is not a table the relay may prune`}; pass inbox, audit or inbox,audit`,
    );
  }
  return tables as RelayPrunable[];
}

/** The SQL script, with comments saying who runs each part, when. */
export function formatRolesSql(sql: RolesSql, section: Section): string {
  const { roles, schema } = sql;
  const lines: string[] = [];
  if (section === 'all' || section === 'setup') {
    lines.push(
      `-- tx-outbox ${packageVersion()}: least-privilege roles for schema "${schema}".`,
      ...ROLE_KINDS.map((kind) => `--   ${roles[kind].padEnd(24)} ${DUTIES[kind]}`),
      '--',
      '-- 1. Setup: once, before the first migrate, as a superuser (or a CREATEROLE role that is a',
      `--    member of ${roles.migrator}, as handing it the schema needs).`,
      '--    Creates the NOLOGIN group roles and the schema, owned by the migrator. Idempotent.',
      ...sql.setup,
      '',
      `-- 2. Migrate as the migrator, so that it owns the tables it creates: log in as a member`,
      `--    that sets the role (ALTER ROLE deploy SET role = '${roles.migrator}', or the connection`,
      `--    option -c role=${roles.migrator}), then: tx-outbox migrate --schema ${schema}`,
      '',
    );
  }
  if (section === 'all' || section === 'grants') {
    lines.push(
      `-- 3. Grants: after every migrate, as ${roles.migrator} or a superuser. Exact and idempotent:`,
      '--    what the runtime roles had on these tables is revoked, then exactly what they need granted.',
      ...sql.grants,
      '',
    );
  }
  if (section === 'all' || section === 'wal') {
    lines.push(
      '-- 4. Revoke (recommended): once per database, as a superuser. Every login may call',
      '--    pg_logical_emit_message by default. The CDC relay publishes a WAL-mode event only if it',
      `--    carries the MAC of the schema's key, which only ${roles.producer} and ${roles.relay} may read`,
      '--    (docs/cdc.md, Who can write events), so another login cannot publish an event either way;',
      "--    revoked, it cannot write logical messages at all (the relay's work to refuse them, WAL).",
      '--    Grant EXECUTE to any other role of this database that writes logical messages.',
      ...sql.walMessages,
      '',
    );
  }
  if (section === 'all') {
    lines.push(
      '-- 5. Log in through members of the groups (no password is ever printed here), e.g.:',
      `--      CREATE ROLE orders_app LOGIN PASSWORD '…' IN ROLE ${roles.producer};`,
      `--      GRANT ${roles.relay} TO outbox_relay_service;`,
      '',
    );
  }
  return `${lines.join('\n')}\n`.replace(/\n\n$/, '\n');
}
