/** `tx-outbox migrate`: creates or upgrades the outbox schema (and, with --cdc, the CDC slot). */

import type { Command } from 'commander';
import { ensureCdcSlot } from '../cdc/setup.js';
import { outboxStatus } from '../ops/status.js';
import { migrate, migrationSql } from '../schema/migrate.js';
import { addCdcNameOptions } from './cdc.js';
import { type DatabaseCommandOptions, withDatabaseOptions, withPool } from './command.js';
import { integerOption, usageError } from './common.js';

interface MigrateCliOptions extends DatabaseCommandOptions {
  readonly partitions?: number;
  readonly cdc?: boolean;
  readonly slot?: string;
  readonly publication?: string;
}

/** Registers `tx-outbox migrate [--partitions N] [--cdc [--slot S] [--publication P]]`. */
export function registerMigrate(program: Command): void {
  const command = program
    .command('migrate')
    .description('create or upgrade the outbox schema (idempotent; safe to run from several processes)')
    .option(
      '--partitions <n>',
      'partition count, fixed when the schema is created (default 16)',
      integerOption(1, 1024),
    )
    .option(
      '--cdc',
      'also create the publication and the logical replication slot of the CDC relay (needs wal_level = logical and the REPLICATION attribute)',
    );
  addCdcNameOptions(command);
  withDatabaseOptions(command);
  command.action((options: MigrateCliOptions) => runMigrate(options));
}

async function runMigrate(options: MigrateCliOptions): Promise<void> {
  if (!options.cdc && (options.slot !== undefined || options.publication !== undefined)) {
    throw usageError('--slot and --publication need --cdc');
  }
  await withPool(options, 2, async (pool) => {
    const result = await migrate(pool, { schema: options.schema, partitions: options.partitions });
    const status = await outboxStatus(pool, { schema: options.schema });
    process.stdout.write(
      `${describeResult(options.schema, result.applied, result.current, status.partitions.length)}\n`,
    );
    if (!options.cdc) return;
    const cdc = await ensureCdcSlot(pool, {
      schema: options.schema,
      ...(options.slot === undefined ? {} : { slot: options.slot }),
      ...(options.publication === undefined ? {} : { publication: options.publication }),
    });
    process.stdout.write(
      `${cdc.created ? 'Created' : 'Kept the existing'} replication slot "${cdc.slot}" and publication "${cdc.publication}" for tx-outbox relay --source cdc.\n`,
    );
  });
}

function describeResult(
  schema: string,
  applied: readonly number[],
  current: number,
  partitions: number,
): string {
  const state = `schema "${schema}" is at version ${current} with ${partitions} partitions`;
  if (applied.length === 0) return `Nothing to apply: ${state}.`;
  const names = new Map(migrationSql({ schema }).map((m) => [m.version, m.name]));
  const list = applied.map((v) => `${String(v).padStart(3, '0')}_${names.get(v) ?? 'unknown'}`).join(', ');
  return `Applied ${applied.length} migration${applied.length === 1 ? '' : 's'} (${list}); ${state}.`;
}
