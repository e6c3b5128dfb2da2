import type { Pool } from 'pg';
import { OutboxValidationError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { CounterMetric, MetricsSink } from '../metrics/sink.js';
import { PRUNED_TABLES, type PruneOptions, prune, resolvePruneOptions } from '../ops/prune.js';

/** `createRelay({ prune })`: the relay prunes its schema in the background (docs/schema.md, Bounded tables). */
export interface RelayPruneOptions extends Omit<PruneOptions, 'schema' | 'dryRun'> {
  /** Between the end of one run and the start of the next, ms. Default 600000 (10 minutes). */
  readonly intervalMs?: number;
}

export const DEFAULT_PRUNE_INTERVAL_MS = 600_000;

export interface ResolvedRelayPrune {
  readonly intervalMs: number;
  readonly options: PruneOptions;
}

/** Validates the relay's prune option at createRelay, so a bad retention fails at the door. */
export function resolveRelayPrune(
  value: RelayPruneOptions | boolean | undefined,
  schema: string,
): ResolvedRelayPrune | undefined {
  if (value === undefined || value === false) return undefined;
  const { intervalMs = DEFAULT_PRUNE_INTERVAL_MS, ...rest } = value === true ? {} : value;
  if (!Number.isSafeInteger(intervalMs) || intervalMs < 10 || intervalMs > 86_400_000) {
    throw new OutboxValidationError(
      'prune.intervalMs',
      `is ${String(intervalMs)}`,
      'Pass whole milliseconds from 10 to 86400000 (a day).',
    );
  }
  const options: PruneOptions = { ...rest, schema };
  resolvePruneOptions(options);
  return { intervalMs, options };
}

/**
 * The relay's background pruner: one run every interval (the first one interval after start), on
 * a connection of the relay's pool. A failed run (database down, a lock timeout …) is logged and
 * tried again the next interval; it never stops the relay. Several relays of one schema take turns:
 * a run that finds another pruner holding the schema's lock does nothing.
 */
export class BackgroundPruner {
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;
  /** `tx_outbox_pruned_rows_total{table}` (docs/metrics.md), when the relay has metrics. */
  readonly #pruned: CounterMetric | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly settings: ResolvedRelayPrune,
    private readonly logger: Logger,
    private readonly relayId: string,
    metrics?: MetricsSink,
  ) {
    this.#pruned = metrics?.enabled
      ? metrics.counter('tx_outbox_pruned_rows_total', 'Rows the background pruner removed, by table.', [
          'table',
        ])
      : undefined;
  }

  start(): void {
    if (this.#stopped || this.#timer) return;
    this.#schedule();
  }

  /** Stops the schedule and waits for a run in flight (its current batch finishes and commits). */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.#running = this.#run().finally(() => {
        this.#running = undefined;
        this.#schedule();
      });
    }, this.settings.intervalMs);
    this.#timer.unref();
  }

  async #run(): Promise<void> {
    try {
      const result = await prune(this.pool, this.settings.options);
      const removed = PRUNED_TABLES.filter((t) => result.removed[t] > 0);
      for (const table of removed) this.#pruned?.inc({ table }, result.removed[table]);
      if (removed.length > 0 || !result.complete) {
        this.logger.info(
          {
            relayId: this.relayId,
            removed: Object.fromEntries(removed.map((t) => [t, result.removed[t]])),
            complete: result.complete,
            ran: result.ran,
            floor: result.floor,
          },
          result.ran ? 'pruned' : 'another pruner of this schema is running; skipped',
        );
      }
    } catch (error) {
      this.logger.warn(
        { err: error, relayId: this.relayId, retryInMs: this.settings.intervalMs },
        'prune failed; trying again next interval',
      );
    }
  }
}
