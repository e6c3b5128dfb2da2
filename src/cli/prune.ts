/** `tx-outbox prune`: keep the outbox's auxiliary tables bounded (docs/schema.md, Bounded tables). */
import type { Command } from 'commander';
import { PRUNED_TABLES, type PruneOptions, type PruneResult, prune } from '../ops/prune.js';
import { type DatabaseCommandOptions, databaseCommand, withPool } from './command.js';
import { integerOption } from './common.js';
import { parseDuration, RETENTION } from './duration.js';

interface Options extends DatabaseCommandOptions {
  readonly dryRun?: boolean;
  readonly olderThan?: string;
  readonly keepAggregates?: boolean;
  readonly relaysOlderThan?: string;
  readonly auditOlderThan?: string;
  readonly inbox?: boolean;
  readonly replayHorizon?: string;
  readonly inboxOlderThan?: string;
  readonly positionsOlderThan?: string;
  readonly attemptsOlderThan?: string;
  readonly releasedOlderThan?: string;
  readonly batchSize?: number;
  readonly budget?: string;
  readonly json?: boolean;
}

/** A retention flag (the unit required), or `--budget` (`bare`: a bare number is ms). */
const optionalDuration = (flag: string, value: string | undefined, bare = false): number | undefined =>
  value === undefined ? undefined : parseDuration(flag, value, bare ? {} : RETENTION);

/** The library options the flags say. */
export function pruneOptionsFromFlags(o: Options): PruneOptions {
  const inbox: PruneOptions['inbox'] = o.inbox
    ? {
        replayHorizonMs: parseDuration('--replay-horizon', o.replayHorizon, RETENTION),
        ...definedOnly({
          dedupRetentionMs: optionalDuration('--inbox-older-than', o.inboxOlderThan),
          positionRetentionMs: optionalDuration('--positions-older-than', o.positionsOlderThan),
          attemptRetentionMs: optionalDuration('--attempts-older-than', o.attemptsOlderThan),
          releasedRetentionMs: optionalDuration('--released-older-than', o.releasedOlderThan),
        }),
      }
    : false;
  return {
    ...definedOnly({
      schema: o.schema,
      aggregateRetentionMs: o.keepAggregates ? false : optionalDuration('--older-than', o.olderThan),
      relayRetentionMs: optionalDuration('--relays-older-than', o.relaysOlderThan),
      auditRetentionMs: optionalDuration('--audit-older-than', o.auditOlderThan),
      batchSize: o.batchSize,
      budgetMs: optionalDuration('--budget', o.budget, true),
    }),
    dryRun: o.dryRun === true,
    inbox,
  };
}

function definedOnly<T extends object>(o: T): { [K in keyof T]: Exclude<T[K], undefined> } {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as {
    [K in keyof T]: Exclude<T[K], undefined>;
  };
}

/** What a run removed, one line per table. */
export function formatPruneResult(result: PruneResult, schema: string): string {
  if (!result.ran) return `Another pruner of schema "${schema}" is running; nothing done.`;
  const verb = result.dryRun ? 'would remove' : 'removed';
  const width = Math.max(...PRUNED_TABLES.map((t) => t.length));
  const lines = PRUNED_TABLES.map((t) => `${t.padEnd(width)}  ${verb} ${result.removed[t]}`);
  lines.push(`sequence floor: ${result.floor}`);
  if (!result.complete) lines.push('The time budget ran out before every table was done: run it again.');
  return lines.join('\n');
}

export function registerPrune(program: Command): void {
  databaseCommand(
    program,
    'prune',
    'delete idle aggregates, dead relays, old audit rows (and with --inbox old inbox records), in small batches',
  )
    .option('--dry-run', 'count what would go; delete nothing')
    .option(
      '--older-than <duration>',
      'aggregates idle this long, everything delivered (default 7d, at least 1m)',
    )
    .option('--keep-aggregates', 'leave aggregate_sequences and aggregate_progress alone')
    .option('--relays-older-than <duration>', 'relays without a heartbeat this long (default 1d)')
    .option('--audit-older-than <duration>', 'audit rows older than this (default 365d)')
    .option('--inbox', "prune this schema's inbox tables too (needs --replay-horizon)")
    .option('--replay-horizon <duration>', 'with --inbox: how far back a broker may redeliver, e.g. 7d')
    .option('--inbox-older-than <duration>', 'with --inbox: dedup records older than this (default 7d)')
    .option('--positions-older-than <duration>', 'with --inbox: positions untouched this long (default 14d)')
    .option('--attempts-older-than <duration>', 'with --inbox: failed-attempt counts (default 7d)')
    .option('--released-older-than <duration>', 'with --inbox: released quarantine rows (default 7d)')
    .option(
      '--batch-size <n>',
      'rows per batch, each its own transaction (default 1000)',
      integerOption(1, 100_000),
    )
    .option('--budget <duration>', 'stop starting batches after this long (default 30s)')
    .option('--json', 'print the result as JSON')
    .action((o: Options) => {
      const options = pruneOptionsFromFlags(o);
      return withPool(o, 1, async (pool) => {
        const result = await prune(pool, options);
        const schema = options.schema ?? 'outbox';
        process.stdout.write(`${o.json ? JSON.stringify(result) : formatPruneResult(result, schema)}\n`);
      });
    });
}
