import type pg from 'pg';
import { OutboxValidationError } from '../errors.js';
import { type RelayOptions, type ResolvedRelayOptions, resolveRelayOptions } from '../relay/options.js';
import { cdcNames } from '../schema/cdc-names.js';

/** The polling relay's options (`listen` ignored: the stream is the wake-up), and the stream's own. */
export interface CdcRelayOptions extends RelayOptions {
  /**
   * Replication slot. Default: this database's slot of the schema, `txo_<database>_<schema>_<hash>`
   * (or `txo_<schema>` while this database has a slot of that name), resolved at start.
   */
  readonly slot?: string;
  /** Publication of `<schema>.events`. Default `txo_<schema>`. */
  readonly publication?: string;
  /**
   * How often the relay writes a heartbeat message into the WAL, ms: on an idle database it lets
   * the slot's confirmed position move on (and proves the stream alive). Default 10000.
   */
  readonly heartbeatMs?: number;
  /** Nothing received on the stream for this long: reconnect, ms. Default 30000; above heartbeatMs. */
  readonly silenceTimeoutMs?: number;
  /** Standby status (confirmed position) sent this often, ms. Default 1000. */
  readonly statusIntervalMs?: number;
  /** The replication connection's settings. Default: the pool's. */
  readonly connection?: pg.ClientConfig;
  /**
   * Events read from the stream but not settled yet (and decoded changes buffered ahead of the
   * reader); above it the stream is paused. Default 2000: four batches of 500 in flight.
   */
  readonly maxInFlight?: number;
  /**
   * Also publish WAL-mode messages of format 1 (tx-outbox before migration 12: no MAC) written
   * after the schema's WAL key was made. Those written before it are always read. Only while
   * producers of an older tx-outbox still write in WAL mode: meanwhile any database login can
   * publish events (docs/cdc.md, Upgrading WAL mode). Default false: refused and counted.
   */
  readonly acceptWalFormat1?: boolean;
}

export interface ResolvedCdcRelayOptions {
  readonly base: ResolvedRelayOptions;
  /** The slot given; undefined: the database's default, resolved by the relay's start (resolveCdcNames). */
  readonly slot: string | undefined;
  readonly publication: string;
  readonly heartbeatMs: number;
  readonly silenceTimeoutMs: number;
  readonly statusIntervalMs: number;
  readonly connection: pg.ClientConfig;
  readonly maxInFlight: number;
  readonly acceptWalFormat1: boolean;
}

function positive(value: number | undefined, fallback: number, field: string): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < 1 || v > 2 ** 31 - 1) {
    throw new OutboxValidationError(
      field,
      `is ${String(v)}`,
      `Pass a positive integer (default ${fallback}).`,
    );
  }
  return v;
}

function flag(value: boolean | undefined, field: string): boolean {
  if (value === undefined) return false;
  if (typeof value !== 'boolean')
    throw new OutboxValidationError(field, `is ${String(value)}`, 'Pass true or false (default false).');
  return value;
}

/**
 * The CDC relay keeps four pooled connections (stream outcomes, handovers, the polling path's
 * claims and outcomes) and borrows one at a time for leases, the gap probe, heartbeats and
 * stats; the replication connection is its own, outside the pool.
 */
const POOL_NEEDED = 6;

export function resolveCdcRelayOptions(options: CdcRelayOptions): ResolvedCdcRelayOptions {
  const base = resolveRelayOptions({ ...options, listen: false });
  const poolMax = (options.pool as { options?: { max?: unknown } }).options?.max;
  if (typeof poolMax === 'number' && poolMax < POOL_NEEDED) {
    throw new OutboxValidationError(
      'pool',
      `allows ${poolMax} connections, fewer than the CDC relay needs`,
      `The CDC relay keeps four (stream outcomes, handovers, polling claims and outcomes) and borrows more: give it max ≥ ${POOL_NEEDED}.`,
    );
  }
  const heartbeatMs = positive(options.heartbeatMs, 10_000, 'heartbeatMs');
  const silenceTimeoutMs = positive(options.silenceTimeoutMs, 30_000, 'silenceTimeoutMs');
  if (silenceTimeoutMs <= heartbeatMs) {
    throw new OutboxValidationError(
      'silenceTimeoutMs',
      `is ${silenceTimeoutMs}, not above heartbeatMs (${heartbeatMs})`,
      'A healthy idle stream carries a heartbeat every heartbeatMs: make the silence timeout longer (e.g. 3×).',
    );
  }
  const { slot, publication } = cdcNames(base.schema, {
    ...(options.slot === undefined ? {} : { slot: options.slot }),
    ...(options.publication === undefined ? {} : { publication: options.publication }),
  });
  const names = { slot, publication };
  const poolOptions = (options.pool as { options?: pg.ClientConfig }).options ?? {};
  return Object.freeze({
    base,
    ...names,
    heartbeatMs,
    silenceTimeoutMs,
    statusIntervalMs: positive(options.statusIntervalMs, 1000, 'statusIntervalMs'),
    connection: options.connection ?? poolOptions,
    maxInFlight: positive(options.maxInFlight, 2_000, 'maxInFlight'),
    acceptWalFormat1: flag(options.acceptWalFormat1, 'acceptWalFormat1'),
  });
}
