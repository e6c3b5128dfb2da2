import { errorMessage, OutboxError } from '../errors.js';
import { redactText } from '../redact.js';
import type { RuntimeContext } from '../relay/runtime.js';
import type { RelaySession } from '../relay/session.js';
import { FencedError } from './handover-rows.js';
import { CDC_SLOT_LOST, type CdcNames, checkCdc } from './setup.js';
import type { RepeatedErrorLog, StreamTrouble } from './standby.js';
import type { CdcMetrics, ReconnectReason } from './stats.js';
import type { StreamCounters } from './stream-state.js';

/** The leases went to another relay while streaming: the stream stops, the relay stands by. */
export class LeasesLost extends OutboxError {
  constructor() {
    super('partition leases lost: this relay stops streaming and stands by', { code: 'TXO_CDC_LEASES_LOST' });
  }
}

function reasonOf(error: unknown): ReconnectReason {
  if (error instanceof LeasesLost) return 'leases_lost';
  if (error instanceof FencedError) return 'fenced';
  const code = (error as { code?: unknown }).code;
  if (code === 'TXO_CDC_SILENT') return 'silent';
  if (code === 'TXO_CDC_SLOT_ACTIVE') return 'slot_active';
  return 'error';
}

/** How often a relay whose slot was lost runs the start checks again. */
const SLOT_LOST_RETRY_MS = 60_000;

export interface StreamRecoveryParts {
  readonly c: RuntimeContext;
  readonly trouble: StreamTrouble;
  readonly log: RepeatedErrorLog;
  readonly metrics: CdcMetrics;
  readonly counters: StreamCounters;
  /** The stream source's connections: new ones after an error. */
  readonly sessions: readonly RelaySession[];
}

/**
 * What the CDC stream source does after its stream ended in an error: reconnect after the
 * runtime's backoff; stand by, leases released, when the stream cannot run here (a standby may
 * do better); or, the slot lost, say so and check again every minute.
 */
export class StreamRecovery {
  /** The slot was lost while running: re-run the start checks before the next attempt. */
  #slotLost = false;

  constructor(private readonly p: StreamRecoveryParts) {}

  /** Before a stream opens: the start checks again if the slot was lost (throws while it is). */
  async slotChecked(names: CdcNames): Promise<void> {
    if (!this.#slotLost) return;
    await checkCdc(this.p.c.o.pool, names);
    this.#slotLost = false;
  }

  /** Returns how long the loop waits before the stream opens again. */
  async recover(error: unknown, names: CdcNames, backoff: () => number): Promise<number> {
    const { c, trouble, log } = this.p;
    this.p.counters.reconnects += 1;
    this.p.metrics.reconnect(reasonOf(error));
    await Promise.all(this.p.sessions.map((s) => s.release(error)));
    const lost = error instanceof LeasesLost || error instanceof FencedError;
    if (lost) c.leases.forget();
    if ((error as { code?: unknown }).code === CDC_SLOT_LOST) {
      await this.#onSlotLost(names, error);
      return 0;
    }
    // Lost leases are a standby's business, not a stream that cannot run.
    if (!lost) trouble.failed();
    if (trouble.yield) {
      const standbyMs = trouble.standbyMs(c.o.random);
      log.report(error, 'CDC stream cannot run: released every lease, standing by', {
        slot: names.slot,
        standbyMs,
      });
      await this.#releaseLeases();
      await this.#pause(standbyMs);
      return 0;
    }
    const delay = backoff();
    log.report(error, 'CDC stream ended; reconnecting', { slot: names.slot, retryInMs: delay });
    return delay;
  }

  /**
   * The slot was invalidated (PostgreSQL removed WAL it needed): nothing can stream from it again.
   * Say so with the start check's full message (what may be missing, how to recover), give the
   * leases back (the polling relay of the recovery needs them), and check again every minute.
   */
  async #onSlotLost(names: CdcNames, error: unknown): Promise<void> {
    const { c, log } = this.p;
    const full = await checkCdc(c.o.pool, names).then(
      () => error,
      (e: unknown) => e,
    );
    c.counters.lastError = redactText(errorMessage(full));
    log.report(full, 'CDC slot lost: not streaming; leases released; checking again every minute', {
      slot: names.slot,
      retryInMs: SLOT_LOST_RETRY_MS,
    });
    this.#slotLost = true;
    c.loop.errors.notReady();
    await this.#releaseLeases();
    await this.#pause(SLOT_LOST_RETRY_MS);
  }

  /** Sleeps `ms` whatever rings the bell meanwhile (new events), unless the relay stops. */
  async #pause(ms: number): Promise<void> {
    const loop = this.p.c.loop;
    const until = performance.now() + ms;
    for (let left = ms; !loop.halted && left > 0; left = until - performance.now())
      await loop.bell.sleep(left);
  }

  async #releaseLeases(): Promise<void> {
    const c = this.p.c;
    try {
      await c.leases.releaseAll();
    } catch (error) {
      c.leases.forget();
      c.o.logger.warn(
        { err: error, relayId: c.o.relayId },
        'could not release leases; they expire on their own',
      );
    }
  }
}
