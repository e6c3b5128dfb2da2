/** `tx-outbox status`: backlog, failures, partition owners and relays, as a table or JSON. */

import type { Command } from 'commander';
import type pg from 'pg';
import { type CdcSlotStatus, cdcSlotStatus } from '../cdc/setup.js';
import { type OutboxStatus, outboxStatus, type PartitionStatus } from '../ops/status.js';
import { addCdcNameOptions, formatCdcLines } from './cdc.js';
import { type DatabaseCommandOptions, withDatabaseOptions, withPool } from './command.js';

interface StatusCliOptions extends DatabaseCommandOptions {
  readonly json?: boolean;
  readonly exact?: boolean;
  readonly slot?: string;
  readonly publication?: string;
}

/** Registers `tx-outbox status [--json]`. */
export function registerStatus(program: Command): void {
  const command = program
    .command('status')
    .description('show pending and dead events, the oldest pending age, partition owners and relays')
    .option('--json', 'print one JSON object instead of a table')
    .option(
      '--exact',
      'count every event: a SCAN of the whole events table (seconds at millions of rows); default: an O(partitions) read, estimated beyond 10,000 rows',
    );
  addCdcNameOptions(command);
  withDatabaseOptions(command);
  command.action((options: StatusCliOptions) => runStatus(options));
}

async function runStatus(options: StatusCliOptions): Promise<void> {
  await withPool(options, 1, async (pool) => {
    const status = await outboxStatus(pool, { schema: options.schema, exact: options.exact === true });
    // The CDC relay's slot, when there is one (a schema without CDC prints nothing more).
    const cdc = await cdcSlot(pool, options);
    const text = options.json
      ? JSON.stringify({ schema: options.schema, ...status, ...(cdc === undefined ? {} : { cdc }) })
      : formatStatus(options.schema, status, cdc);
    process.stdout.write(`${text}\n`);
  });
}

/** The slot, when it exists; none on a schema from before migration 11 (no cdc_state to read). */
async function cdcSlot(pool: pg.Pool, options: StatusCliOptions): Promise<CdcSlotStatus | undefined> {
  try {
    const slot = await cdcSlotStatus(pool, {
      schema: options.schema,
      ...(options.slot === undefined ? {} : { slot: options.slot }),
      ...(options.publication === undefined ? {} : { publication: options.publication }),
    });
    return slot.exists ? slot : undefined;
  } catch (error) {
    if ((error as { code?: unknown }).code === UNDEFINED_TABLE) return undefined;
    throw error;
  }
}

const UNDEFINED_TABLE = '42P01';

/** The human view: summary, partitions grouped by owner, relays, and the CDC slot if any. */
export function formatStatus(schema: string, status: OutboxStatus, cdc?: CdcSlotStatus): string {
  const about = status.exact ? '' : '~';
  const lines = [
    `Outbox "${schema}"${status.exact ? '' : `  (estimated: ~ marks figures scaled from the first ${status.sampled} events)`}`,
    `  pending              ${about}${status.pending}`,
    `  oldest due age       ${formatAge(status.oldestPendingAgeSeconds)}`,
    `  retrying             ${status.retrying}${status.exact ? '' : ' (among the sampled events)'}`,
    `  dead                 ${status.dead}${status.dead > 0 ? '  (each blocks its aggregate until replayed)' : ''}`,
    `  partitions unowned   ${status.partitionsUnowned}${status.partitionsUnowned > 0 ? '  (no live lease: nobody publishes them)' : ''}`,
    `  relays live          ${status.relaysLive}`,
    '',
    `Partitions (${status.partitions.length})`,
    ...table(
      ['OWNER', 'PARTITIONS', 'LEASE', 'PENDING', 'OLDEST DUE'],
      partitionRows(status.partitions, about),
    ),
    '',
    `Relays (${status.relays.length})`,
  ];
  if (status.relays.length === 0) {
    lines.push('  none running');
  } else {
    const rows = status.relays.map((r) => [
      r.relayId,
      r.host,
      String(r.pid),
      `${formatAge(r.lastHeartbeatSecondsAgo)} ago`,
    ]);
    lines.push(...table(['RELAY', 'HOST', 'PID', 'LAST HEARTBEAT'], rows));
  }
  if (cdc !== undefined) lines.push('', 'CDC', ...formatCdcLines(cdc));
  return lines.join('\n');
}

function partitionRows(partitions: readonly PartitionStatus[], about: string): string[][] {
  const byOwner = new Map<string | null, PartitionStatus[]>();
  for (const p of partitions) byOwner.set(p.owner, [...(byOwner.get(p.owner) ?? []), p]);
  return [...byOwner.entries()].map(([owner, owned]) => [
    owner ?? '(none)',
    `${ranges(owned.map((p) => p.partition))} (${owned.length})`,
    owner === null ? '-' : leaseText(owned),
    `${about}${owned.reduce((sum, p) => sum + p.pending, 0)}`,
    formatAge(oldest(owned)),
  ]);
}

function oldest(owned: readonly PartitionStatus[]): number | null {
  const ages = owned.map((p) => p.oldestPendingAgeSeconds).filter((a): a is number => a !== null);
  return ages.length === 0 ? null : Math.max(...ages);
}

function leaseText(owned: readonly PartitionStatus[]): string {
  const soonest = Math.min(...owned.map((p) => p.leaseExpiresInSeconds ?? 0));
  return soonest < 0 ? `expired ${formatAge(-soonest)} ago` : `expires in ${formatAge(soonest)}`;
}

/** `0-3, 7, 9-10` */
function ranges(numbers: readonly number[]): string {
  const sorted = [...numbers].sort((a, b) => a - b);
  const parts: string[] = [];
  let start = sorted[0];
  for (let i = 0; start !== undefined && i < sorted.length; i++) {
    const current = sorted[i]!;
    const next = sorted[i + 1];
    if (next === current + 1) continue;
    parts.push(start === current ? String(current) : `${start}-${current}`);
    start = next;
  }
  return parts.join(', ');
}

function formatAge(seconds: number | null): string {
  if (seconds === null) return '-';
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function table(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const render = (cells: readonly string[]) =>
    `  ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ')}`.trimEnd();
  return [render(header), ...rows.map(render)];
}
