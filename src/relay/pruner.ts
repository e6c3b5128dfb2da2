import type { Pool } from 'pg';
import { OutboxValidationError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { CounterMetric, MetricsSink } from '../metrics/sink.js';
import { PRUNED_TABLES, type PruneOptions, prune, resolvePruneOptions } from '../ops/prune.js';
import { PRUNE_RIGHTS_SQL } from '../ops/prune-sql.js';
import { quoteSchema, withSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';

/**
 * `createRelay({ prune })`: the relay prunes its schema in the background (docs/schema.md, Bounded
 * tables). The outbox's own tables always; the audit trail only with `auditRetentionMs` and the
 * inbox tables only with `inbox`, each when the relay's role may (`tx-outbox roles --relay-prunes`).
 */
export interface RelayPruneOptions extends Omit<PruneOptions, 'schema' | 'dryRun' | 'auditRetentionMs'> {
  /** Between the end of one run and the start of the next, ms. Default 600000 (10 minutes). */
  readonly intervalMs?: number;
  /**
   * Audit rows older than this go. Default: kept (the operator's `tx-outbox prune` removes them
   * after 365 days); the relay's role needs the right (`tx-outbox roles --relay-prunes audit`).
   */
  readonly auditRetentionMs?: number | false;
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
  // The audit trail is the operators': the relay prunes it only when told to.
  const options: PruneOptions = { ...rest, auditRetentionMs: rest.auditRetentionMs ?? false, schema };
  resolvePruneOptions(options);
  return { intervalMs, options };
}

/** The tables a run may be told to prune that the relay's role may be denied (src/schema/roles.ts). */
type Guarded = 'audit' | 'inbox';

/**
 * The relay's background pruner: one run every interval (the first one interval after start), on
 * a connection of the relay's pool. A failed run (database down, a lock timeout …) is logged and
 * tried again the next interval; it never stops the relay. Several relays of one schema take turns:
 * a run that finds another pruner holding the schema's lock does nothing. Before a run told to
 * prune the audit trail or the inbox, it asks whether its role may: without the right, that part
 * is skipped, with one warning (again only after the right came and went).
 */
export class BackgroundPruner {
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;
  /** `tx_outbox_pruned_rows_total{table}` (docs/metrics.md), when the relay has metrics. */
  readonly #pruned: CounterMetric | undefined;
  /** The guarded parts this pruner has warned it may not prune (and has not been able to since). */
  readonly #denied = new Set<Guarded>();
  readonly #rightsSql: string;

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
    this.#rightsSql = withSchema(PRUNE_RIGHTS_SQL, quoteSchema(settings.options.schema ?? DEFAULT_SCHEMA));
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
      const result = await prune(this.pool, await this.#permitted());
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

  /** This run's options: without the audit trail or the inbox where the role may not delete them. */
  async #permitted(): Promise<PruneOptions> {
    const options = this.settings.options;
    const asked: Guarded[] = [];
    if (options.auditRetentionMs !== false && options.auditRetentionMs !== undefined) asked.push('audit');
    if (options.inbox !== undefined && options.inbox !== false) asked.push('inbox');
    if (asked.length === 0) return options;
    const { rows } = await this.pool.query<Record<Guarded, boolean>>(this.#rightsSql);
    const rights = rows[0];
    let permitted = options;
    for (const part of asked) {
      if (rights?.[part]) {
        this.#denied.delete(part);
        continue;
      }
      permitted = { ...permitted, ...(part === 'audit' ? { auditRetentionMs: false } : { inbox: false }) };
      if (this.#denied.has(part)) continue;
      this.#denied.add(part);
      this.logger.warn(
        {
          relayId: this.relayId,
          table: part === 'audit' ? 'audit' : 'inbox, inbox_positions, inbox_attempts, inbox_quarantine',
        },
        part === 'audit'
          ? "prune: auditRetentionMs is set, but this relay's role may not delete audit rows; skipping them. " +
              'Grant it (tx-outbox roles --relay-prunes audit, then the grants) or leave the audit trail to tx-outbox prune'
          : "prune: inbox pruning is set, but this relay's role may not delete the inbox tables; skipping them. " +
              'Grant it (tx-outbox roles --relay-prunes inbox, then the grants) or leave the inbox to tx-outbox prune --inbox',
      );
    }
    return permitted;
  }
}
