/** `tx-outbox dead list | replay`: dead events, and replaying them with a reason (audited). */

import type { Command } from 'commander';
import { type DeadEvent, listDead, replayDead } from '../ops/dead-letter.js';
import { type DatabaseCommandOptions, withDatabaseOptions, withPool } from './command.js';
import { integerOption, usageError } from './common.js';

interface ListOptions extends DatabaseCommandOptions {
  readonly json?: boolean;
  readonly limit: number;
}

interface ReplayCliOptions extends DatabaseCommandOptions {
  readonly reason?: string;
  readonly all?: boolean;
  readonly actor?: string;
}

/** Registers `tx-outbox dead list [--json] [--limit N]` and `tx-outbox dead replay <ids…>|--all --reason …`. */
export function registerDead(program: Command): void {
  const dead = program
    .command('dead')
    .description('list dead events, or replay them with a reason (audited)');

  const list = dead
    .command('list')
    .description('list dead events, oldest first, with their last error')
    .option('--json', 'print a JSON array')
    .option('--limit <n>', 'at most this many (default 100)', integerOption(1, 100_000), 100);
  withDatabaseOptions(list);
  list.action((options: ListOptions) => runList(options));

  const replay = dead
    .command('replay [eventIds...]')
    .description('put dead events back to pending and unblock their aggregates')
    .option('--reason <text>', 'why (required; kept in the audit table)')
    .option('--all', 'replay every dead event')
    .option('--actor <name>', 'who (default: the database user)');
  withDatabaseOptions(replay);
  replay.action((ids: string[], options: ReplayCliOptions) => runReplay(ids, options));
}

async function runList(options: ListOptions): Promise<void> {
  await withPool(options, 1, async (pool) => {
    const events = await listDead(pool, { schema: options.schema, limit: options.limit });
    process.stdout.write(`${options.json ? JSON.stringify(events) : formatDead(events)}\n`);
  });
}

async function runReplay(ids: string[], options: ReplayCliOptions): Promise<void> {
  const reason = options.reason;
  if (!reason) throw usageError('replay needs --reason "<why>"; it is kept in the audit table');
  if (options.all && ids.length > 0) throw usageError('give event ids or --all, not both');
  if (!options.all && ids.length === 0) throw usageError('give the event ids to replay, or --all');
  // An id given twice is one event (UUIDs in any case): counted once, replayed once.
  const eventIds = [...new Set(ids.map((id) => id.toLowerCase()))];
  await withPool(options, 1, async (pool) => {
    const replayed = await replayDead(pool, {
      schema: options.schema,
      eventIds: options.all ? 'all' : eventIds,
      reason,
      actor: options.actor,
    });
    const skipped = options.all ? 0 : eventIds.length - replayed.length;
    process.stdout.write(
      `Replayed ${replayed.length} dead event${replayed.length === 1 ? '' : 's'}` +
        `${skipped > 0 ? `; ${skipped} given id(s) were not dead` : ''}.\n`,
    );
  });
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
