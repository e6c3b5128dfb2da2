/**
 * `tx-outbox dead list | show | replay | skip`: dead events, and resolving them with a reason
 * (audited) — replayed once the cause is fixed, or skipped (never published; consumers are told by
 * a skip marker, unless `--no-publish`).
 */

import type { Command } from 'commander';
import { countDead, type DeadEvent, hasDeadFilter, listDead, replayDead } from '../ops/dead-letter.js';
import { type AuditEntry, type EventDetails, showEvent } from '../ops/dead-show.js';
import { skipDead } from '../ops/dead-skip.js';
import { type DatabaseCommandOptions, withDatabaseOptions, withPool } from './command.js';
import { CliError, EXIT_NOT_FOUND, integerOption, usageError } from './common.js';
import { type DeadFilterFlags, deadFilterOf } from './dead-filter.js';

interface ListOptions extends DatabaseCommandOptions, DeadFilterFlags {
  readonly json?: boolean;
  readonly limit: number;
}

interface ShowOptions extends DatabaseCommandOptions {
  readonly json?: boolean;
}

interface ReplayCliOptions extends DatabaseCommandOptions, DeadFilterFlags {
  readonly reason?: string;
  readonly all?: boolean;
  readonly actor?: string;
  readonly dryRun?: boolean;
}

interface SkipCliOptions extends DatabaseCommandOptions {
  readonly reason?: string;
  readonly actor?: string;
  /** `--no-publish` sets it false. */
  readonly publish: boolean;
  readonly dryRun?: boolean;
}

/** The most events a dry run of `replay --all` lists. */
const DRY_RUN_LIST_LIMIT = 1000;

function withFilterOptions(command: Command): Command {
  return command
    .option('--aggregate <type/id>', 'only this aggregate, e.g. order/42 (split at the first slash)')
    .option('--aggregate-type <type>', 'only aggregates of this type')
    .option('--aggregate-id <id>', 'only aggregates with this id')
    .option('--type <type>', 'only events of this type')
    .option('--since <time>', 'only events dead since this ISO time, or for this long (2h, 30m, 7d)');
}

/** Registers `tx-outbox dead list | show | replay | skip`. */
export function registerDead(program: Command): void {
  const dead = program
    .command('dead')
    .description('list and show dead events; replay them, or skip them, with a reason (audited)');

  const list = withFilterOptions(
    dead
      .command('list')
      .description('list dead events, oldest first, with their last error')
      .option('--json', 'print a JSON array')
      .option('--limit <n>', 'at most this many (default 100)', integerOption(1, 100_000), 100),
  );
  withDatabaseOptions(list);
  list.action((options: ListOptions) => runList(options));

  const show = dead
    .command('show <eventId>')
    .description('one event: every column, last error, headers, payload preview, audit history')
    .option('--json', 'print JSON');
  withDatabaseOptions(show);
  show.action((eventId: string, options: ShowOptions) => runShow(eventId, options));

  const replay = withFilterOptions(
    dead
      .command('replay [eventIds...]')
      .description('put dead events back to pending and unblock their aggregates')
      .option('--reason <text>', 'why (required; kept in the audit table)')
      .option('--all', 'replay every dead event the filters select (at least one filter)')
      .option('--actor <name>', 'who (default: the database user)')
      .option('--dry-run', 'show what would be replayed, change nothing'),
  );
  withDatabaseOptions(replay);
  replay.action((ids: string[], options: ReplayCliOptions) => runReplay(ids, options));

  const skip = dead
    .command('skip <eventIds...>')
    .description(
      'resolve dead events without publishing them: a skip marker takes their place, so consumers move past them',
    )
    .option('--reason <text>', 'why (required; kept in the audit table and the skip marker)')
    .option('--actor <name>', 'who (default: the database user)')
    .option(
      '--no-publish',
      'no skip marker (for a destination that refuses even the marker): remove the events and move their aggregates past them; strict consumers will see a gap',
    )
    .option('--dry-run', 'show what would be skipped, change nothing');
  withDatabaseOptions(skip);
  skip.action((ids: string[], options: SkipCliOptions) => runSkip(ids, options));
}

async function runList(options: ListOptions): Promise<void> {
  const filter = deadFilterOf(options);
  await withPool(options, 1, async (pool) => {
    const events = await listDead(pool, { schema: options.schema, limit: options.limit, ...filter });
    process.stdout.write(`${options.json ? JSON.stringify(events) : formatDead(events)}\n`);
  });
}

async function runShow(eventId: string, options: ShowOptions): Promise<void> {
  await withPool(options, 1, async (pool) => {
    const shown = await showEvent(pool, { schema: options.schema, eventId });
    if (shown.event === null && shown.audit.length === 0) {
      throw new CliError(
        `no event ${eventId} in the outbox table or the audit trail (delivered events leave the table)`,
        EXIT_NOT_FOUND,
      );
    }
    if (options.json) {
      process.stdout.write(`${JSON.stringify(shown)}\n`);
      return;
    }
    const lines = shown.event
      ? formatDetails(shown.event)
      : [`${eventId}: not in the outbox table (delivered, or skipped without a marker)`];
    lines.push(shown.audit.length === 0 ? 'audit: none' : 'audit:', ...shown.audit.map(formatAudit));
    process.stdout.write(`${lines.join('\n')}\n`);
  });
}

async function runReplay(ids: string[], options: ReplayCliOptions): Promise<void> {
  const reason = options.reason;
  if (!reason) throw usageError('replay needs --reason "<why>"; it is kept in the audit table');
  if (options.all && ids.length > 0) throw usageError('give event ids or --all, not both');
  if (!options.all && ids.length === 0)
    throw usageError('give the event ids to replay, or --all with a filter');
  const filter = deadFilterOf(options);
  if (options.all && !hasDeadFilter(filter)) {
    throw usageError(
      'replay --all needs at least one filter (--aggregate, --aggregate-type, --aggregate-id, --type, --since); ' +
        'check what it selects with dead list first',
    );
  }
  if (!options.all && hasDeadFilter(filter)) {
    throw usageError('filters select events for --all; with event ids, give no filter');
  }
  // An id given twice is one event (UUIDs in any case): counted once, replayed once.
  const eventIds = [...new Set(ids.map((id) => id.toLowerCase()))];
  await withPool(options, 1, async (pool) => {
    const schema = options.schema;
    if (options.all) {
      const n = await countDead(pool, { schema, ...filter });
      process.stdout.write(
        `${n} dead event${n === 1 ? '' : 's'} match${n === 1 ? 'es' : ''}; ${options.dryRun ? 'dry run, nothing changed' : 'replaying'}\n`,
      );
      if (options.dryRun) {
        const events = await listDead(pool, { schema, ...filter, limit: DRY_RUN_LIST_LIMIT });
        if (events.length > 0) process.stdout.write(`${formatDead(events)}\n`);
        if (n > events.length) process.stdout.write(`… and ${n - events.length} more\n`);
        return;
      }
    }
    const replayed = await replayDead(pool, {
      schema,
      eventIds: options.all ? 'all' : eventIds,
      filter,
      reason,
      actor: options.actor,
      dryRun: options.dryRun === true,
    });
    const done = new Set(replayed);
    const notDead = options.all ? [] : eventIds.filter((id) => !done.has(id));
    const verb = options.dryRun ? 'Would replay' : 'Replayed';
    process.stdout.write(
      `${verb} ${replayed.length} dead event${replayed.length === 1 ? '' : 's'}` +
        `${notDead.length > 0 ? `; ${notDead.length} given id(s) were not dead` : ''}.` +
        `${options.dryRun ? ' Dry run: nothing changed.' : ''}\n`,
    );
    if (options.dryRun && replayed.length > 0) process.stdout.write(`${replayed.join('\n')}\n`);
    if (notDead.length > 0) throw notActedOn('replayed', notDead);
  });
}

async function runSkip(ids: string[], options: SkipCliOptions): Promise<void> {
  const reason = options.reason;
  if (!reason) throw usageError('skip needs --reason "<why>"; it is kept in the audit table');
  await withPool(options, 1, async (pool) => {
    const result = await skipDead(pool, {
      schema: options.schema,
      eventIds: ids,
      reason,
      actor: options.actor,
      publish: options.publish,
      dryRun: options.dryRun === true,
    });
    const n = result.skipped.length;
    const what = `${n} dead event${n === 1 ? '' : 's'}`;
    const how = result.published
      ? 'a skip marker takes the place of each, and consumers move past it'
      : 'removed without a marker, aggregates moved past them (strict consumers will see a gap)';
    const lines = [
      result.dryRun ? `Would skip ${what}: ${how}. Dry run: nothing changed.` : `Skipped ${what}: ${how}.`,
      ...result.skipped.map((id) => `  ${id}`),
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
    if (result.notFound.length > 0) throw notActedOn('skipped', result.notFound);
  });
}

/**
 * Ids given to replay or skip that named no dead event: the others were done (stdout says which),
 * and the exit code (3) tells a script that not every id was.
 */
function notActedOn(what: 'replayed' | 'skipped', ids: readonly string[]): CliError {
  const why =
    what === 'replayed'
      ? 'not dead (pending, delivered, resolved before, or never there)'
      : 'not found (delivered, skipped before, or never there)';
  return new CliError(
    `${ids.length} given id(s) not ${what}, ${why}; see tx-outbox event <id>: ${ids.join(', ')}`,
    EXIT_NOT_FOUND,
  );
}

function formatDead(events: readonly DeadEvent[]): string {
  if (events.length === 0) return 'No dead events.';
  return events
    .map(
      (e) =>
        `${e.eventId}  ${e.aggregateType}/${e.aggregateId} #${e.sequence}  ${e.type}  attempts ${e.attempts}  ` +
        `dead since ${e.deadAt?.toISOString() ?? '?'}\n    ${e.lastError ?? ''}`,
    )
    .join('\n');
}

function formatDetails(e: EventDetails): string[] {
  const state =
    e.status === 'dead'
      ? `dead since ${e.deadAt?.toISOString() ?? '?'} after ${e.attempts} attempt${e.attempts === 1 ? '' : 's'}`
      : `pending, ${e.attempts} failed attempt${e.attempts === 1 ? '' : 's'}, next ${e.nextAttemptAt.toISOString()}`;
  return [
    `${e.eventId}  (row ${e.id}, partition ${e.partition})`,
    `  aggregate   ${e.aggregateType}/${e.aggregateId}  sequence ${e.sequence}`,
    `  type        ${e.type}  schema version ${e.schemaVersion}  topic ${e.topic ?? '(default)'}`,
    `  status      ${state}`,
    `  created     ${e.createdAt.toISOString()}${e.deliverAfter ? `  deliver after ${e.deliverAfter.toISOString()}` : ''}`,
    `  last error  ${e.lastError ?? '(none)'}`,
    `  headers     ${JSON.stringify(e.headers)}`,
    `  payload     ${e.payloadBytes} bytes: ${e.payloadPreview}${e.payloadPreview.length < e.payloadBytes ? ' …' : ''}`,
  ];
}

function formatAudit(a: AuditEntry): string {
  const others =
    a.eventCount > 1 ? ` (with ${a.eventCount - 1} other event${a.eventCount === 2 ? '' : 's'})` : '';
  const original = a.original
    ? `\n      original: ${String(a.original['event_type'])} v${String(a.original['schema_version'])}, payload ${JSON.stringify(a.original['payload'] ?? a.original['payload_bytes']).slice(0, 200)}`
    : '';
  return `  ${a.at.toISOString()}  ${a.action} by ${a.actor}${others}: ${a.reason}${original}`;
}
