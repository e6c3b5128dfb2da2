/**
 * `tx-outbox cdc status|drop-slot`: the CDC relay's replication slot, its lag and the way to get
 * rid of it. `formatCdcLines` is also what `tx-outbox status` prints when a slot exists.
 */

import type { Command } from 'commander';
import { type CdcSlotStatus, cdcSlotStatus, dropCdcSlot, resolveCdcNames } from '../cdc/setup.js';
import { type DatabaseCommandOptions, databaseCommand, withPool } from './command.js';
import { nonEmptyOption, usageError } from './common.js';

interface CdcNameFlags {
  readonly slot?: string;
  readonly publication?: string;
}

interface CdcStatusCliOptions extends DatabaseCommandOptions, CdcNameFlags {
  readonly json?: boolean;
}

interface DropSlotCliOptions extends DatabaseCommandOptions, CdcNameFlags {
  readonly yes?: boolean;
  readonly terminate?: boolean;
}

/** What `--slot` defaults to, for the help texts (src/schema/cdc-names.ts, defaultSlotSql). */
export const DEFAULT_SLOT_HELP = "this database's: txo_<database>_<schema>_<hash>";

/** Adds `--slot` and `--publication` (defaults: this database's slot of the schema, `txo_<schema>`). */
export function addCdcNameOptions(command: Command): Command {
  return command
    .option(
      '--slot <name>',
      `replication slot of the CDC relay (default ${DEFAULT_SLOT_HELP})`,
      nonEmptyOption,
    )
    .option('--publication <name>', 'publication of the CDC relay (default txo_<schema>)', nonEmptyOption);
}

/** Registers `tx-outbox cdc status` and `tx-outbox cdc drop-slot`. */
export function registerCdc(program: Command): void {
  const cdc = program
    .command('cdc')
    .description('the CDC relay (relay --source cdc): replication slot status and removal');
  addCdcNameOptions(
    databaseCommand(cdc, 'status', 'show the replication slot: active, confirmed LSN, lag, retained WAL'),
  )
    .option('--json', 'print one JSON object instead of text')
    .action((options: CdcStatusCliOptions) => runCdcStatus(options));
  addCdcNameOptions(
    databaseCommand(
      cdc,
      'drop-slot',
      'drop the replication slot and its publication (WAL-mode events not yet streamed are lost)',
    ),
  )
    .option('--yes', 'really drop it')
    .option('--terminate', 'end the relay streaming the slot first instead of refusing')
    .action((options: DropSlotCliOptions) => runDropSlot(options));
}

function names(options: DatabaseCommandOptions & CdcNameFlags) {
  return {
    schema: options.schema,
    ...(options.slot === undefined ? {} : { slot: options.slot }),
    ...(options.publication === undefined ? {} : { publication: options.publication }),
  };
}

async function runCdcStatus(options: CdcStatusCliOptions): Promise<void> {
  await withPool(options, 1, async (pool) => {
    const status = await cdcSlotStatus(pool, names(options));
    const text = options.json
      ? JSON.stringify({ schema: options.schema, ...status })
      : [`CDC slot of outbox "${options.schema}"`, ...formatCdcLines(status)].join('\n');
    process.stdout.write(`${text}\n`);
  });
}

async function runDropSlot(options: DropSlotCliOptions): Promise<void> {
  if (!options.yes) {
    throw usageError(
      'drop-slot needs --yes: WAL-mode events (via: "wal") the slot has not confirmed exist nowhere else and are lost with it; ' +
        'table-mode events stay in the events table for the polling relay',
    );
  }
  await withPool(options, 2, async (pool, logger) => {
    // One name for the status and the drop; a slot of another database is refused by both.
    const resolved = await resolveCdcNames(pool, names(options));
    const before = await cdcSlotStatus(pool, resolved);
    if (before.exists && before.lagBytes !== null && before.lagBytes > 0) {
      logger.warn(
        { slot: before.slot, confirmedLsn: before.confirmedLsn, lagBytes: before.lagBytes },
        'dropping a slot with unconfirmed WAL: WAL-mode events committed after its confirmed LSN and not yet published are lost',
      );
    }
    const dropped = await dropCdcSlot(pool, { ...resolved, terminate: options.terminate === true });
    process.stdout.write(
      `${dropped.slot ? `Dropped replication slot "${before.slot}"` : `No replication slot "${before.slot}"`}; ` +
        `${dropped.publication ? `dropped publication "${before.publication}"` : `no publication "${before.publication}"`}.\n`,
    );
  });
}

/** The slot lines of `cdc status` and `tx-outbox status`. */
export function formatCdcLines(status: CdcSlotStatus): string[] {
  if (!status.exists) {
    return [`  slot                 ${status.slot}: none (tx-outbox migrate --cdc creates it)`];
  }
  const lost = status.walStatus === 'lost';
  return [
    `  slot                 ${status.slot}  (wal_status ${status.walStatus ?? '-'}${lost ? ': LOST: events after the confirmed LSN may be missing; drain the table with the polling relay, then cdc drop-slot --yes and migrate --cdc' : ''})`,
    `  streaming            ${status.active ? `yes (walsender PID ${status.activePid ?? '?'})` : 'no'}`,
    `  confirmed LSN        ${status.confirmedLsn ?? '-'}`,
    `  lag                  ${formatBytes(status.lagBytes)}${status.lagSeconds === null ? '' : `, ${status.lagSeconds.toFixed(1)} s`}${status.measuredAt === null ? '' : ` (measured ${status.measuredAt.toISOString()})`}`,
    `  WAL retained         ${formatBytes(status.retainedBytes)}`,
  ];
}

function formatBytes(n: number | null): string {
  if (n === null) return '-';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}
