import { aggregateKey } from '../aggregate-key.js';
import {
  brokerUnavailable,
  errorMessage,
  isBrokerUnavailable,
  OutboxError,
  PublishError,
} from '../errors.js';
import { wakeChannel } from '../producer/enqueue-sql.js';
import type { OutboxMessage, PublishOutcome } from '../publishers/contract.js';
import { CallAbort } from '../publishers/core/call-abort.js';
import { redactText } from '../redact.js';
import { withSchema } from '../schema/identifiers.js';
import { fullJitterDelay } from './backoff.js';
import { CLAIM_SQL } from './claim-sql.js';
import { PartitionLeases } from './leases.js';
import { type RelayOptions, type ResolvedRelayOptions, resolveRelayOptions } from './options.js';
import { waves } from './ordering-gate.js';
import { OutageLog, RefusedAggregates } from './outage.js';
import { RECORD_OUTCOME_SQL } from './outcome-sql.js';
import { RelaySession } from './session.js';
import { Doorbell, WakeListener } from './wakeup.js';

export interface RelayStats {
  /** Events acknowledged by the broker and removed from the outbox. */
  published: number;
  /** Failed attempts rescheduled with backoff. */
  retried: number;
  /** Events that went dead (max attempts or permanent error). */
  dead: number;
  /** Publishes refused because the broker was unreachable (no attempt charged). */
  unavailable: number;
  batches: number;
  /** Partitions this relay holds now. */
  partitions: number[];
  /** Last loop error (database or publisher), if any. */
  lastError: string | undefined;
  /** Time spent per batch in each step, in ms: mean and max since start. */
  timings: { claim: Timing; publish: Timing; record: Timing };
}

export interface Timing {
  mean: number;
  max: number;
}

class Stopwatch {
  private total = 0;
  private count = 0;
  private max = 0;

  add(ms: number): void {
    this.total += ms;
    this.count += 1;
    if (ms > this.max) this.max = ms;
  }

  get(): Timing {
    return { mean: this.count === 0 ? 0 : this.total / this.count, max: this.max };
  }
}

export interface Relay {
  readonly id: string;
  /** Starts the loop; idempotent. Resolves once the relay is running. */
  start(): Promise<void>;
  /**
   * Finishes the batch in flight (up to `timeout` ms, then aborts it), gives back the leases,
   * and closes the publisher (unless `closePublisher: false`); idempotent. Nothing of the
   * relay's keeps the process alive afterwards (the pool is yours to end).
   */
  stop(options?: { timeout?: number }): Promise<void>;
  /** Wakes an idle relay at once, e.g. right after a commit in the same process. */
  wake(): void;
  stats(): RelayStats;
}

interface ClaimedRow {
  passed: boolean;
  id: string;
  event_id: string;
  partition: number;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  event_type: string;
  schema_version: number;
  topic: string | null;
  payload: string | null;
  payload_bytes: Buffer | null;
  headers: string;
  created_at: Date;
  attempts: number;
}

interface Claimed {
  readonly rows: ClaimedRow[];
  /** Rows the claim looked at, including those the gate held back. */
  readonly scanned: number;
  readonly partitions: number[];
  readonly epochs: string[];
}

interface Verdict {
  readonly claimed: Claimed;
  readonly delivered: string[];
  readonly failures: Failure[];
  readonly unavailable: number;
  /** Aggregates with an event refused as unavailable. */
  readonly refused: ReadonlySet<string>;
}

interface Failure {
  readonly id: string;
  readonly status: 'pending' | 'dead';
  readonly delayMs: number;
  readonly error: string;
}

interface Statements {
  readonly claim: { name: string; text: string };
  readonly outcome: { name: string; text: string };
}

/** How long an idle relay keeps polling fast before it sleeps and asks for NOTIFY. */
const SETTLE_MS = 50;
/** After asking for NOTIFY, one more look this much later, for commits that read the flag before. */
const GRACE_MS = 10;

/** Creates a polling relay: leased partitions, ordering gate, backoff, dead events. */
export function createRelay(options: RelayOptions): Relay {
  return new PollingRelay(resolveRelayOptions(options));
}

function toMessage(row: ClaimedRow): OutboxMessage {
  const bytes = row.payload_bytes;
  return {
    id: row.id,
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    type: row.event_type,
    schemaVersion: row.schema_version,
    topic: row.topic,
    payload: bytes ?? Buffer.from(row.payload ?? 'null'),
    contentType: bytes ? 'application/octet-stream' : 'application/json',
    headers: JSON.parse(row.headers) as Record<string, string>,
    createdAt: row.created_at,
    attempts: row.attempts,
  };
}

class PollingRelay implements Relay {
  readonly id: string;
  private readonly leases: PartitionLeases;
  private readonly doorbell = new Doorbell();
  private readonly sql: Statements;
  private listener: WakeListener | undefined;
  private loopDone: Promise<void> | undefined;
  private stopping: Promise<void> | undefined;
  private abort = new AbortController();
  private halt = false;
  private renewTimer: NodeJS.Timeout | undefined;
  private readonly claimer: RelaySession;
  private readonly recorder: RelaySession;
  private partitionCount: number | undefined;
  private readonly counters = { published: 0, retried: 0, dead: 0, unavailable: 0, batches: 0 };
  private readonly outage: OutageLog;
  private readonly refused = new RefusedAggregates();
  private readonly held = new Map<string, number>();
  private readonly heldCount = new Map<string, number>();
  private readonly inFlightAggregates = new Map<string, number>();
  private idle = { since: 0, step: 1, flagged: false, graced: false };
  private readonly watches = { claim: new Stopwatch(), publish: new Stopwatch(), record: new Stopwatch() };
  private lastError: string | undefined;

  constructor(private readonly o: ResolvedRelayOptions) {
    this.id = o.relayId;
    this.outage = new OutageLog(
      o.logger,
      { relayId: o.relayId, publisher: o.publisher.name },
      o.outageReminderMs,
    );
    const tag = o.schema.replace(/[^a-z0-9_]/g, '');
    this.sql = {
      claim: { name: `txo_claim_${tag}`, text: withSchema(CLAIM_SQL, o.quotedSchema) },
      outcome: { name: `txo_outcome_${tag}`, text: withSchema(RECORD_OUTCOME_SQL, o.quotedSchema) },
    };
    // The claim must walk the primary key in id order whatever the (churning) statistics
    // say: a bitmap or sequential scan plus sort would cost time in proportion to the backlog.
    const settings = `SET synchronous_commit = ${o.synchronousCommit}; SET enable_seqscan = off; SET enable_bitmapscan = off`;
    this.claimer = new RelaySession(o.pool, settings, o.logger, 'claim');
    this.recorder = new RelaySession(o.pool, settings, o.logger, 'outcome');
    this.leases = new PartitionLeases(
      o.pool,
      o.quotedSchema,
      o.relayId,
      o.leaseMs,
      () => this.partitions(),
      o.logger,
    );
  }

  stats(): RelayStats {
    return {
      ...this.counters,
      partitions: this.leases.snapshot().partitions,
      lastError: this.lastError,
      timings: {
        claim: this.watches.claim.get(),
        publish: this.watches.publish.get(),
        record: this.watches.record.get(),
      },
    };
  }

  wake(): void {
    this.doorbell.wake();
  }

  async start(): Promise<void> {
    if (this.stopping)
      throw new OutboxError('the relay was stopped; create a new one', { code: 'TXO_RELAY_STOPPED' });
    if (this.loopDone) return;
    try {
      await this.partitions();
    } catch (error) {
      // A missing schema is a setup mistake: say so now. A database that is down is transient: the loop retries.
      if (error instanceof OutboxError && error.code === 'TXO_NO_SCHEMA') throw error;
      this.o.logger.warn({ err: error, relayId: this.id }, 'database not reachable at start; retrying');
    }
    // Stopped (or started by a concurrent call) while we waited: nothing more to start.
    if (this.loopDone || this.stopping) return;
    if (this.o.signal) {
      if (this.o.signal.aborted) {
        await this.stop();
        return;
      }
      this.o.signal.addEventListener('abort', this.onAbort, { once: true });
    }
    if (this.o.listen) {
      this.listener = new WakeListener(
        this.o.pool,
        wakeChannel(this.o.schema),
        () => this.wake(),
        this.o.logger,
      );
      this.listener.start();
    }
    const every = Math.max(100, Math.floor(this.o.leaseMs / 3));
    this.renewTimer = setInterval(() => {
      this.leases.renew().catch((error: unknown) => {
        this.o.logger.warn({ err: error, relayId: this.id }, 'lease renewal failed');
      });
    }, every);
    this.loopDone = this.loop();
    this.o.logger.info({ relayId: this.id, schema: this.o.schema }, 'relay started');
  }

  stop(options: { timeout?: number } = {}): Promise<void> {
    if (!this.stopping) this.stopping = this.shutdown(options.timeout ?? 30_000);
    return this.stopping;
  }

  private readonly onAbort = (): void => {
    void this.stop();
  };

  private async shutdown(timeout: number): Promise<void> {
    this.halt = true;
    this.o.signal?.removeEventListener('abort', this.onAbort);
    this.doorbell.wake();
    if (this.loopDone) {
      const timer = setTimeout(() => this.abort.abort(new Error('relay stop deadline reached')), timeout);
      try {
        await this.loopDone;
      } finally {
        clearTimeout(timer);
      }
    }
    if (this.renewTimer) clearInterval(this.renewTimer);
    await this.listener?.stop();
    try {
      await this.leases.releaseAll();
    } catch (error) {
      this.o.logger.warn({ err: error }, 'could not release leases; they expire on their own');
    }
    await Promise.all([this.claimer.release(), this.recorder.release()]);
    if (this.o.closePublisher) {
      await this.o.publisher.close().catch((error: unknown) => {
        this.o.logger.warn({ err: error, relayId: this.id }, 'closing the publisher failed');
      });
    }
    this.o.logger.info({ relayId: this.id, ...this.counters }, 'relay stopped');
  }

  private async partitions(): Promise<number> {
    if (this.partitionCount === undefined) {
      const { rows } = await this.o.pool
        .query<{ partitions: number }>(`SELECT partitions FROM ${this.o.quotedSchema}.config`)
        .catch((error: unknown) => {
          if ((error as { code?: unknown }).code === '42P01') return { rows: [] };
          throw error;
        });
      if (!rows[0]) {
        throw new OutboxError(`no outbox schema "${this.o.schema}" found; run migrate first`, {
          code: 'TXO_NO_SCHEMA',
        });
      }
      this.partitionCount = rows[0].partitions;
    }
    return this.partitionCount;
  }

  /**
   * The relay loop, a three-stage pipeline: while batch k is published, batch k-1's
   * outcome is recorded and batch k+1 is claimed. A claim skips the ids of every batch
   * not yet recorded, and the ordering gate holds back the later events of their
   * aggregates (their progress has not advanced), so stages never overlap on one
   * aggregate. The pipeline is drained before leases are rebalanced and before idling.
   */
  private async loop(): Promise<void> {
    let failures = 0;
    let nextRebalance = 0;
    const rebalanceEvery = Math.max(100, Math.floor(this.o.leaseMs / 3));
    let prefetch: Promise<Claimed> | undefined;
    let recording: Promise<void> | undefined;
    const inFlight = new Set<string>();
    const drain = async (): Promise<void> => {
      const p = prefetch;
      const r = recording;
      prefetch = undefined;
      recording = undefined;
      await p?.catch(() => undefined);
      await r;
    };
    while (!this.halt) {
      try {
        if (!prefetch && Date.now() >= nextRebalance) {
          await drain();
          const short = await this.leases.rebalance();
          // Short of our share: look again soon, as leases of a crashed relay expire.
          nextRebalance = Date.now() + (short ? Math.min(rebalanceEvery, 500) : rebalanceEvery);
        }
        if (!prefetch && this.leases.size === 0) {
          await drain();
          await this.doorbell.sleep(Math.min(this.o.pollIntervalMs, rebalanceEvery));
          continue;
        }
        const claimed = await (prefetch ?? this.claim([...inFlight]));
        prefetch = undefined;
        if (claimed.rows.length === 0) {
          if (recording) {
            // Events held back behind the batch being recorded become claimable once it lands.
            await drain();
            continue;
          }
          // Only held-back aggregates came back: they are excluded now, look again at once.
          if (claimed.scanned > 0) continue;
          await this.whenIdle(Math.max(0, nextRebalance - Date.now()));
          continue;
        }
        await this.awake();
        for (const row of claimed.rows) {
          inFlight.add(row.id);
          const key = `${row.aggregate_type}\u001f${row.aggregate_id}`;
          this.inFlightAggregates.set(key, (this.inFlightAggregates.get(key) ?? 0) + 1);
          this.heldCount.delete(key);
        }
        if (!this.halt && Date.now() < nextRebalance && claimed.scanned === this.o.batchSize) {
          prefetch = this.claim([...inFlight]);
          prefetch.catch(() => undefined);
        }
        const verdict = await this.publishBatch(claimed);
        await recording;
        recording = this.record(verdict).finally(() => {
          for (const row of claimed.rows) {
            inFlight.delete(row.id);
            const key = `${row.aggregate_type}\u001f${row.aggregate_id}`;
            const left = (this.inFlightAggregates.get(key) ?? 1) - 1;
            if (left > 0) this.inFlightAggregates.set(key, left);
            else this.inFlightAggregates.delete(key);
          }
        });
        recording.catch(() => undefined);
        failures = 0;
        if (verdict.unavailable > 0) {
          // The broker is unreachable: the events stay as they were, retried after a backoff.
          this.outage.refused(verdict.unavailable, this.lastError);
          const step = this.outage.refusedBatches;
          const delay = fullJitterDelay({ baseMs: 200, capMs: 5000 }, step, this.o.random) + 50;
          this.refused.refused(verdict.refused, Date.now() + delay);
          // Nothing got through: wait. Others did (one destination of several down): carry
          // on with them; the refused aggregates are left out of claims until then.
          if (verdict.delivered.length === 0 && verdict.failures.length === 0) {
            await drain();
            await this.doorbell.sleep(delay);
          }
        } else if (this.refused.outstanding() === 0) {
          this.outage.recovered();
        }
      } catch (error) {
        await drain().catch(() => undefined);
        inFlight.clear();
        this.inFlightAggregates.clear();
        if (this.halt) break;
        failures += 1;
        this.lastError = redactText(errorMessage(error));
        await Promise.all([this.claimer.release(error), this.recorder.release(error)]);
        const delay = 100 + fullJitterDelay({ baseMs: 200, capMs: 10_000 }, failures, this.o.random);
        this.o.logger.error(
          { err: error, relayId: this.id, retryInMs: delay },
          'relay loop error; backing off',
        );
        nextRebalance = 0;
        await this.doorbell.sleep(delay);
      }
    }
    await drain().catch((error: unknown) => {
      this.o.logger.warn(
        { err: error, relayId: this.id },
        'last outcome not recorded; its events will be republished',
      );
    });
  }

  /**
   * Idle policy. Right after the last event the relay polls fast (1, 2, 2, 2 … ms for
   * SETTLE_MS), so steady low-rate traffic is picked up within milliseconds without any
   * NOTIFY. Then, when it LISTENs, it marks its partitions `sleeping` (producers NOTIFY
   * only then), claims once more, waits GRACE_MS for transactions that read the flag
   * before it was set, claims again, and sleeps until a wake-up or the poll interval.
   */
  private async whenIdle(untilRebalanceMs: number): Promise<void> {
    const idle = this.idle;
    const now = Date.now();
    if (idle.since === 0) {
      idle.since = now;
      idle.step = 1;
    }
    const cap = (ms: number) => Math.min(ms, untilRebalanceMs);
    if (now - idle.since < SETTLE_MS) {
      await this.doorbell.sleep(cap(idle.step));
      idle.step = Math.min(idle.step * 2, 2);
      return;
    }
    if (this.o.listen && !idle.flagged) {
      await this.leases.setSleeping(true);
      idle.flagged = true;
      return;
    }
    if (idle.flagged && !idle.graced) {
      idle.graced = true;
      await this.doorbell.sleep(cap(GRACE_MS));
      return;
    }
    // Re-assert: a no-op unless partitions were acquired meanwhile.
    if (idle.flagged) await this.leases.setSleeping(true);
    await this.doorbell.sleep(cap(this.o.pollIntervalMs));
  }

  private async awake(): Promise<void> {
    const flagged = this.idle.flagged;
    this.idle = { since: 0, step: 1, flagged: false, graced: false };
    if (flagged) await this.leases.setSleeping(false);
  }

  private async claim(exclude: readonly string[] = []): Promise<Claimed> {
    const { partitions, epochs } = this.leases.snapshot();
    const client = await this.claimer.get();
    const started = performance.now();
    const { rows } = await client.query<ClaimedRow>({
      ...this.sql.claim,
      values: [partitions, epochs, this.id, this.o.batchSize, exclude, this.heldKeys()],
    });
    if (rows.length > 0) this.watches.claim.add(performance.now() - started);
    const passed = rows.filter((r) => r.passed);
    if (passed.length < rows.length) this.hold(rows.filter((r) => !r.passed));
    return { rows: passed, partitions, epochs, scanned: rows.length };
  }

  /**
   * Aggregates whose next event is not claimable (scheduled for later with deliverAfter,
   * or missing — a sequence gap) are held back for a poll interval, so their later events
   * do not fill the claims. Aggregates with an event in flight are not held: the gate
   * releases them as soon as that event's outcome is recorded. `times` counts the claims
   * that held an aggregate back, however many of its events each claim returned.
   */
  private hold(rows: readonly ClaimedRow[]): void {
    const until = Date.now() + this.o.pollIntervalMs;
    const seen = new Set<string>();
    for (const r of rows) {
      const key = `${r.aggregate_type}\u001f${r.aggregate_id}`;
      if (this.inFlightAggregates.has(key) || seen.has(key)) continue;
      seen.add(key);
      const times = (this.heldCount.get(key) ?? 0) + 1;
      this.heldCount.set(key, times);
      this.held.set(key, until);
      if (times === 10 || times % 100 === 0) {
        this.o.logger.warn(
          { relayId: this.id, aggregateType: r.aggregate_type, aggregateId: r.aggregate_id, times },
          'aggregate held back: its next event is scheduled for later (deliverAfter) or missing (sequence gap)',
        );
      }
    }
  }

  private heldKeys(): string[] {
    const now = Date.now();
    for (const [key, until] of this.held) {
      if (until <= now) this.held.delete(key);
    }
    if (this.heldCount.size > 10_000) this.heldCount.clear();
    return [...this.held.keys(), ...this.refused.waiting()];
  }

  /** Publishes a claimed batch through the ordering gate; the verdict per event, nothing recorded yet. */
  private async publishBatch(claimed: Claimed): Promise<Verdict> {
    const messages = claimed.rows.map(toMessage);
    const delivered: string[] = [];
    const failures: Failure[] = [];
    const blocked = new Set<string>();
    const refused = new Set<string>();
    let unavailable = 0;
    const publishStarted = performance.now();
    for (const wave of waves(messages)) {
      const ready = wave.filter((m) => !blocked.has(aggregateKey(m)));
      if (ready.length === 0) continue;
      const outcomes = await this.publish(ready);
      for (let i = 0; i < ready.length; i++) {
        const message = ready[i]!;
        const outcome = outcomes[i]!;
        if (outcome.ok) {
          delivered.push(message.id);
          this.refused.settled(aggregateKey(message));
          continue;
        }
        blocked.add(aggregateKey(message));
        // An attempt cut short by our own shutdown, or refused because the broker is
        // unreachable, is not the event's fault: leave the event untouched.
        if (this.abort.signal.aborted) continue;
        if (isBrokerUnavailable(outcome.error)) {
          unavailable += 1;
          refused.add(aggregateKey(message));
          this.lastError = redactText(errorMessage(outcome.error));
          continue;
        }
        failures.push(this.judge(message, outcome));
        this.refused.settled(aggregateKey(message));
      }
    }
    this.watches.publish.add(performance.now() - publishStarted);
    this.counters.unavailable += unavailable;
    return { claimed, delivered, failures, unavailable, refused };
  }

  /** Records a batch's verdict in one statement, fenced by the epochs it was claimed under. */
  private async record(verdict: Verdict): Promise<void> {
    const { delivered, failures, claimed } = verdict;
    if (delivered.length === 0 && failures.length === 0) return;
    const client = await this.recorder.get();
    const recordStarted = performance.now();
    const { rows: result } = await client.query<{ delivered: number; failed: number }>({
      ...this.sql.outcome,
      values: [
        this.id,
        claimed.partitions,
        claimed.epochs,
        delivered,
        failures.map((f) => f.id),
        failures.map((f) => f.status),
        failures.map((f) => f.delayMs),
        failures.map((f) => f.error),
      ],
    });
    this.watches.record.add(performance.now() - recordStarted);
    const recorded = result[0];
    this.counters.batches += 1;
    this.counters.published += recorded?.delivered ?? 0;
    for (const f of failures) {
      if (f.status === 'dead') this.counters.dead += 1;
      else this.counters.retried += 1;
    }
    if (recorded && recorded.delivered + recorded.failed < delivered.length + failures.length) {
      this.o.logger.warn(
        {
          relayId: this.id,
          expected: delivered.length + failures.length,
          recorded: recorded.delivered + recorded.failed,
        },
        'outcome fenced: a partition changed owner during the batch; the new owner will republish',
      );
    }
  }

  private judge(message: OutboxMessage, outcome: Extract<PublishOutcome, { ok: false }>): Failure {
    const attempt = message.attempts + 1;
    const dead = !outcome.retryable || attempt >= this.o.maxAttempts;
    const reason = outcome.retryable ? '' : 'permanent: ';
    // A safety net under every publisher: no URL's password or query token goes into
    // last_error (nor the log line below), whatever a client library put in its message.
    const error = redactText(`${reason}${errorMessage(outcome.error)}`).slice(0, 4000);
    if (dead) {
      this.o.logger.error(
        { relayId: this.id, eventId: message.eventId, attempts: attempt, error },
        'event is dead; it blocks its aggregate until replayed',
      );
      return { id: message.id, status: 'dead', delayMs: 0, error };
    }
    const jitter = fullJitterDelay(this.o.backoff, attempt, this.o.random);
    const delayMs = Math.min(this.o.backoff.capMs, Math.max(jitter, outcome.retryAfterMs ?? 0));
    this.o.logger.warn(
      { relayId: this.id, eventId: message.eventId, attempts: attempt, retryInMs: delayMs, error },
      'publish failed; will retry',
    );
    return { id: message.id, status: 'pending', delayMs, error };
  }

  private async publish(batch: readonly OutboxMessage[]): Promise<PublishOutcome[]> {
    // One abort per call, its listener and timer removed when the call ends: a signal derived
    // with AbortSignal.any from the relay-long signal would be retained per call.
    const abort = new CallAbort({
      signal: this.abort.signal,
      timeoutMs: this.o.publishTimeoutMs,
      timeoutMessage: `publish did not finish within ${this.o.publishTimeoutMs} ms`,
    });
    try {
      const outcomes = await abort.race(this.o.publisher.publish(batch, abort.signal));
      if (outcomes.length !== batch.length) {
        throw new OutboxError(
          `publisher ${this.o.publisher.name} returned ${outcomes.length} outcomes for ${batch.length}`,
          { code: 'TXO_PUBLISHER_CONTRACT' },
        );
      }
      return outcomes;
    } catch (error) {
      // A call that hangs past the deadline is the broker's trouble (no attempt charged); a
      // publisher that throws is charged like any retryable failure, so a message that makes
      // it throw goes dead in the end instead of blocking its batch forever.
      const message = `publisher ${this.o.publisher.name} failed: ${redactText(errorMessage(error))}`;
      const e =
        abort.cause === 'timeout'
          ? brokerUnavailable(message, error)
          : new PublishError(message, { retryable: true, cause: error });
      this.lastError = e.message;
      return batch.map(() => ({ ok: false, retryable: true, error: e }));
    } finally {
      abort.dispose();
    }
  }
}
