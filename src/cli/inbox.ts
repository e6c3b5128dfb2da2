/** `tx-outbox inbox list | show | release | prune`: operating a consumer's inbox. */

import type { Command } from 'commander';
import {
  isQuarantineId,
  listQuarantine,
  MAX_QUARANTINE_ID,
  pruneInbox,
  type QuarantinedMessage,
  releaseQuarantinedReport,
  showQuarantined,
} from '../inbox/quarantine.js';
import { type DatabaseCommandOptions, databaseCommand, withPool } from './command.js';
import { CliError, EXIT_NOT_FOUND, usageError } from './common.js';
import { parseDuration, RETENTION } from './duration.js';

interface Options extends DatabaseCommandOptions {
  readonly consumer?: string;
  readonly json?: boolean;
  readonly reason?: string;
  readonly actor?: string;
  readonly olderThan?: string;
  readonly replayHorizon?: string;
}

/** The quarantine ids given on the command line, each a whole number from 1 to 2^63 − 1 (bigint). */
function quarantineIds(ids: readonly string[]): string[] {
  const bad = ids.find((id) => !isQuarantineId(id));
  if (bad !== undefined) {
    throw usageError(
      `"${bad}" is not a quarantine id: ids are whole numbers from 1 to ${MAX_QUARANTINE_ID} (see inbox list)`,
    );
  }
  return [...ids];
}

export function registerInbox(program: Command): void {
  const inbox = program.command('inbox').description("a consumer's inbox: quarantined messages, pruning");

  databaseCommand(inbox, 'list', 'list quarantined messages, oldest first, with the reason')
    .option('--consumer <name>', 'only this consumer')
    .option('--json', 'print a JSON array')
    .action((o: Options) =>
      withPool(o, 1, async (pool) => {
        const rows = await listQuarantine(pool, { schema: o.schema, consumer: o.consumer });
        process.stdout.write(`${o.json ? JSON.stringify(rows) : formatList(rows)}\n`);
      }),
    );

  databaseCommand(inbox, 'show <id>', 'one quarantined message, with its headers and payload')
    .option('--json', 'print JSON')
    .action((id: string, o: Options) => {
      quarantineIds([id]);
      return withPool(o, 1, async (pool) => {
        const m = await showQuarantined(pool, { schema: o.schema, id });
        if (!m) throw new CliError(`no quarantined message with id ${id} (see inbox list)`, EXIT_NOT_FOUND);
        const payload = m.payload ? Buffer.from(m.payload).toString('utf8') : '';
        process.stdout.write(
          `${o.json ? JSON.stringify({ ...m, payload }) : `${formatList([m])}\n  headers ${JSON.stringify(m.headers)}\n  payload ${payload}`}\n`,
        );
      });
    });

  databaseCommand(
    inbox,
    'release <ids...>',
    'release quarantined messages so the consumer handles them again',
  )
    .option('--reason <text>', 'why (required; kept in the audit table)')
    .option('--actor <name>', 'who (default: the database user)')
    .action((ids: string[], o: Options) => {
      if (!o.reason) throw usageError('release needs --reason "<why>"; it is kept in the audit table');
      const given = quarantineIds(ids);
      return withPool(o, 1, async (pool) => {
        const released = await releaseQuarantinedReport(pool, {
          schema: o.schema,
          ids: given,
          reason: o.reason!,
          actor: o.actor,
        });
        process.stdout.write(
          `Released ${released.eventIds.length} message(s); the consumer replays them (inbox.replayReleased).\n`,
        );
        if (released.notReleased.length > 0) {
          throw new CliError(
            `${released.notReleased.length} given id(s) not released: no such quarantined message, or released ` +
              `before (see inbox list): ${released.notReleased.join(', ')}`,
            EXIT_NOT_FOUND,
          );
        }
      });
    });

  databaseCommand(
    inbox,
    'prune',
    'delete dedup records older than --older-than (never inside the replay horizon)',
  )
    .option('--older-than <duration>', 'e.g. 30d')
    .option('--replay-horizon <duration>', 'how far back a broker may redeliver, e.g. 7d (required)')
    .action((o: Options) => {
      const dedupRetentionMs = parseDuration('--older-than', o.olderThan, RETENTION);
      const replayHorizonMs = parseDuration('--replay-horizon', o.replayHorizon, RETENTION);
      return withPool(o, 1, async (pool) => {
        const n = await pruneInbox(pool, { schema: o.schema, dedupRetentionMs, replayHorizonMs });
        process.stdout.write(`Pruned ${n} dedup record(s).\n`);
      });
    });
}

function formatList(rows: readonly QuarantinedMessage[]): string {
  if (rows.length === 0) return 'No quarantined messages.';
  return rows
    .map(
      (m) =>
        `#${m.id} ${m.consumer}  ${m.type} v${m.schemaVersion}  ${m.aggregateType}/${m.aggregateId} #${m.sequence}  ` +
        `${m.releasedAt ? 'released' : 'parked'} ${m.quarantinedAt.toISOString()}\n    ${m.reason}`,
    )
    .join('\n');
}
