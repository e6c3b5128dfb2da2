/**
 * Faults the demo injects on purpose, so that at-least-once delivery really produces
 * duplicates and the inbox has something to deduplicate: lost acknowledgements.
 *
 * - On the relay's side, a publish that reached the broker is reported to the relay as
 *   failed (retryable): the relay does not record it and publishes the event again, as
 *   it would after a crash between the publish and the recording of its outcome.
 * - On the consumer's side (NATS), a delivery the inbox committed is answered `deferred`
 *   to the adapter, which naks it: JetStream delivers it again, as it would after the
 *   consumer crashed between its commit and its ack.
 */

import type { HandleResult, Inbox, InboxHandler } from '../../inbox/inbox.js';
import type { InboxMessage } from '../../inbox/message.js';
import type { Logger } from '../../logger.js';
import { failed, type Publisher } from '../../publishers/contract.js';

/** Marks the errors and reasons of injected faults (and lets their log lines be told apart). */
export const INJECTED = 'injected by the demo';

/**
 * Chooses `percent` % of the events, spread evenly (deterministic: with 5, every 20th),
 * each at most once, and follows them until they are delivered again.
 */
export class LostAcks {
  /** Acknowledgements lost so far. */
  injected = 0;
  /** Events delivered again after their acknowledgement was lost. */
  redelivered = 0;
  private readonly chosen = new Set<string>();
  private readonly outstanding = new Set<string>();
  private credit = 0;

  constructor(readonly percent: number) {}

  /** Lost acknowledgements whose event was not delivered again (yet). */
  get pending(): number {
    return this.outstanding.size;
  }

  /** A successful delivery: true when its acknowledgement is to be lost (never twice for one event). */
  lose(eventId: string): boolean {
    this.seen(eventId);
    if (this.percent === 0 || this.chosen.has(eventId)) return false;
    this.credit += this.percent;
    if (this.credit < 100) return false;
    this.credit -= 100;
    this.chosen.add(eventId);
    this.outstanding.add(eventId);
    this.injected += 1;
    return true;
  }

  /** Any delivery of an event: if its acknowledgement was lost, it has now been delivered again. */
  seen(eventId: string): void {
    if (this.outstanding.delete(eventId)) this.redelivered += 1;
  }
}

/** The relay's side: publishes through `inner`, then reports some successful publishes as failed. */
export function losePublishAcks(inner: Publisher, lost: LostAcks): Publisher {
  return {
    name: inner.name,
    async publish(batch, signal) {
      const outcomes = await inner.publish(batch, signal);
      return outcomes.map((outcome, i) => {
        if (!outcome.ok || !lost.lose(batch[i]!.eventId)) return outcome;
        return failed(new Error(`${INJECTED}: acknowledgement lost after the publish`), true);
      });
    },
    close: () => inner.close(),
  };
}

/** The consumer's side: answers `deferred` for some deliveries the inbox committed, so the adapter naks them. */
export function loseConsumerAcks<T, Tx>(inbox: Inbox<T, Tx>, lost: LostAcks): Inbox<T, Tx> {
  return {
    consumer: inbox.consumer,
    async handle<D extends T>(message: InboxMessage, handler: InboxHandler<D, Tx>): Promise<HandleResult> {
      const result = await inbox.handle(message, handler);
      if (result.status === 'processed' && lost.lose(message.eventId))
        return { status: 'deferred', reason: `${INJECTED}: acknowledgement lost after the inbox commit` };
      lost.seen(message.eventId);
      return result;
    },
    replayReleased: (handler, options) => inbox.replayReleased(handler, options),
    stats: () => inbox.stats(),
  };
}

/** `logger`, with the relay's "publish failed; will retry" lines of injected faults lowered to debug. */
export function quietInjected(logger: Logger): Logger {
  const injected = (obj: object): boolean => String((obj as { error?: unknown }).error).includes(INJECTED);
  return {
    debug: (obj, msg) => logger.debug(obj, msg),
    info: (obj, msg) => logger.info(obj, msg),
    warn: (obj, msg) => (injected(obj) ? logger.debug(obj, msg) : logger.warn(obj, msg)),
    error: (obj, msg) => logger.error(obj, msg),
  };
}
