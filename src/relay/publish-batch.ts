import { aggregateKey } from '../aggregate-key.js';
import {
  brokerUnavailable,
  errorMessage,
  isBrokerUnavailable,
  OutboxError,
  PublishError,
} from '../errors.js';
import { exhaustionCode, LOCAL_EXHAUSTION_CODES } from '../network-errors.js';
import { failed, type OutboxMessage, type Publisher, type PublishOutcome } from '../publishers/contract.js';
import { CallAbort } from '../publishers/core/call-abort.js';
import { redactText } from '../redact.js';
import { PublishTracing } from '../tracing/publish-spans.js';
import { waves } from './ordering-gate.js';
import type { RefusedAggregates } from './outage.js';
import type { SourceBatch } from './source.js';
import type { RelayCounters } from './stats.js';
import { type Failure, type JudgePolicy, judge, PUBLISHER_FAILED, type Verdict } from './verdicts.js';

export interface BatchPublisherParts {
  readonly publisher: Publisher;
  readonly publishTimeoutMs: number;
  /** Aborted when the relay's stop deadline passes: the call in flight is cut short. */
  readonly stopping: AbortSignal;
  readonly counters: RelayCounters;
  readonly refused: RefusedAggregates;
  readonly policy: JudgePolicy;
}

/**
 * The publish step: a claimed batch through the ordering gate's waves (wave k+1 of an
 * aggregate only after its wave-k event was acknowledged; a failure blocks the rest of that
 * aggregate), the verdict per event; nothing recorded yet.
 */
export class BatchPublisher {
  readonly #tracing: PublishTracing;

  constructor(private readonly p: BatchPublisherParts) {
    this.#tracing = new PublishTracing(p.publisher.name);
  }

  async publish(claimed: SourceBatch): Promise<Verdict> {
    const p = this.p;
    const loading = this.#tracing.ready();
    if (loading) await loading;
    const delivered: string[] = [];
    const failures: Failure[] = [];
    const blocked = new Set<string>();
    const refused = new Set<string>();
    let unavailable = 0;
    const started = performance.now();
    p.counters.metrics.batch(claimed.messages.length);
    for (const wave of waves(claimed.messages)) {
      const ready = blocked.size === 0 ? wave : wave.filter((m) => !blocked.has(aggregateKey(m)));
      if (ready.length === 0) continue;
      const outcomes = hostOutOfResourcesAll(await this.call(ready));
      if (!p.stopping.aborted) p.counters.metrics.called(ready, outcomes);
      for (let i = 0; i < ready.length; i++) {
        const message = ready[i]!;
        const outcome = outcomes[i]!;
        if (outcome.ok) {
          delivered.push(message.id);
          if (!p.refused.empty) p.refused.settled(aggregateKey(message));
          continue;
        }
        const key = aggregateKey(message);
        blocked.add(key);
        // An attempt cut short by our own shutdown, or refused because the broker is
        // unreachable or this host is out of resources, is not the event's fault: leave the
        // event untouched.
        if (p.stopping.aborted) continue;
        if (isBrokerUnavailable(outcome.error)) {
          unavailable += 1;
          refused.add(key);
          p.counters.lastError = redactText(errorMessage(outcome.error));
          continue;
        }
        failures.push(judge(message, outcome, p.policy));
        p.refused.settled(key);
      }
    }
    p.counters.watches.publish.add(performance.now() - started);
    p.counters.counts.unavailable += unavailable;
    p.counters.metrics.unavailable(unavailable);
    return { claimed, delivered, failures, unavailable, refused };
  }

  /** One publish call, a `publish` span per message around it when a tracer provider is registered. */
  private async call(batch: readonly OutboxMessage[]): Promise<PublishOutcome[]> {
    const traced = this.#tracing.start(batch);
    if (traced === undefined) return this.attempt(batch);
    const outcomes = await this.attempt(traced.messages);
    traced.end(outcomes);
    return outcomes;
  }

  /** One publish call under the call's time limit; a call that throws or hangs fails all its messages. */
  private async attempt(batch: readonly OutboxMessage[]): Promise<PublishOutcome[]> {
    const { publisher, publishTimeoutMs } = this.p;
    // One abort per call, its listener and timer removed when the call ends: a signal derived
    // with AbortSignal.any from the relay-long signal would be retained per call.
    const abort = new CallAbort({
      signal: this.p.stopping,
      timeoutMs: publishTimeoutMs,
      timeoutMessage: `publish did not finish within ${publishTimeoutMs} ms`,
    });
    let answered = false;
    this.p.counters.broker.calling();
    try {
      const outcomes = await abort.race(publisher.publish(batch, abort.signal));
      if (outcomes.length !== batch.length) {
        throw new OutboxError(
          `publisher ${publisher.name} returned ${outcomes.length} outcomes for ${batch.length}`,
          { code: 'TXO_PUBLISHER_CONTRACT' },
        );
      }
      // The broker's own answer: taken, or refused for a reason other than being unreachable.
      answered = !this.p.stopping.aborted && outcomes.some((o) => o.ok || !isBrokerUnavailable(o.error));
      return outcomes;
    } catch (error) {
      // A call that hangs past the deadline is the broker's trouble (no attempt charged); a
      // publisher that throws is charged like any retryable failure, so a message that makes
      // it throw goes dead in the end instead of blocking its batch forever.
      const message = `publisher ${publisher.name} failed: ${redactText(errorMessage(error))}`;
      const e =
        abort.cause === 'timeout'
          ? brokerUnavailable(message, error)
          : new PublishError(message, { retryable: true, code: PUBLISHER_FAILED, cause: error });
      this.p.counters.lastError = e.message;
      return batch.map(() => ({ ok: false, retryable: true, error: e }));
    } finally {
      this.p.counters.broker.called(answered);
      abort.dispose();
    }
  }
}

/** {@link hostOutOfResources} of each outcome: the same array when nothing changes (the usual case). */
function hostOutOfResourcesAll(outcomes: PublishOutcome[]): PublishOutcome[] {
  let result = outcomes;
  for (let i = 0; i < outcomes.length; i++) {
    const outcome = outcomes[i]!;
    if (outcome.ok) continue;
    const judged = hostOutOfResources(outcome);
    if (judged === outcome) continue;
    if (result === outcomes) result = outcomes.slice(); // the publisher's array stays as it gave it
    result[i] = judged;
  }
  return result;
}

/**
 * A failure caused by this process or host running out of a resource (EMFILE, ENFILE, ENOBUFS,
 * ENOMEM, EADDRNOTAVAIL on the error or its cause chain), whatever publisher reported it and
 * however: judged like an unreachable broker (`BROKER_UNAVAILABLE`), so the relay backs off as a
 * whole and says so at once, and no event is charged an attempt (or dead-lettered) for it.
 * Every publisher's outcomes pass here, so no publisher needs to know these codes.
 */
export function hostOutOfResources(outcome: PublishOutcome): PublishOutcome {
  if (outcome.ok || isBrokerUnavailable(outcome.error)) return outcome;
  const code = exhaustionCode(outcome.error);
  if (code === undefined) return outcome;
  const why = LOCAL_EXHAUSTION_CODES.get(code)!;
  return failed(
    brokerUnavailable(
      `${why} (${code}), so nothing can be sent: ${errorMessage(outcome.error)}`,
      outcome.error,
    ),
    true,
  );
}
