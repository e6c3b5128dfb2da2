/** `tx-outbox history maintain`: the delivery history's partition maintenance, by hand. */

import type { Command } from 'commander';
import { maintainHistory } from '../relay/history.js';
import { type DatabaseCommandOptions, databaseCommand, withPool } from './command.js';
import { integerOption } from './common.js';

interface MaintainCliOptions extends DatabaseCommandOptions {
  readonly historyDays?: number;
  readonly aheadDays?: number;
  readonly json?: boolean;
}

/** Registers `tx-outbox history maintain [--history-days N] [--ahead-days N] [--json]`. */
export function registerHistory(program: Command): void {
  const history = program
    .command('history')
    .description('the delivery history (relay --history): partition maintenance');
  const maintain = databaseCommand(
    history,
    'maintain',
    'create the daily partitions ahead and drop those older than the retention (the relay does it hourly)',
  )
    .option('--history-days <n>', 'days of history kept (default 7)', integerOption(1, 3650))
    .option('--ahead-days <n>', 'daily partitions kept ready after today (default 3)', integerOption(1, 60))
    .option('--json', 'print JSON');
  maintain.action((options: MaintainCliOptions) => runMaintain(options));
}

async function runMaintain(options: MaintainCliOptions): Promise<void> {
  await withPool(options, 1, async (pool) => {
    const done = await maintainHistory(pool, {
      schema: options.schema,
      retentionDays: options.historyDays,
      aheadDays: options.aheadDays,
    });
    if (options.json) {
      process.stdout.write(`${JSON.stringify(done)}\n`);
      return;
    }
    const list = (days: readonly string[]): string => (days.length === 0 ? 'none' : days.join(', '));
    process.stdout.write(
      `Created: ${list(done.created)}. Dropped: ${list(done.dropped)}.` +
        `${done.moved > 0 ? ` Moved ${done.moved} row(s) out of the DEFAULT partition.` : ''}` +
        `${done.purged > 0 ? ` Purged ${done.purged} old DEFAULT row(s).` : ''}` +
        `${done.deferred.length > 0 ? ` Deferred (lock not granted in time; run again): ${done.deferred.join(', ')}.` : ''}` +
        ` ${done.partitions} partitions.\n`,
    );
  });
}
