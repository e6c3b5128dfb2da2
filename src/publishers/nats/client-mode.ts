/**
 * The `client` publish mode: one `js.publish()` of the official client per message (a request
 * each), at most `maxInFlight` awaiting their PubAck. Kept for comparison with the pipeline
 * and as a fallback; the same outcomes.
 */
import { type JetStreamClient, type JetStreamPublishOptions, jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { PublishError } from '../../errors.js';
import { DELIVERED, failed, type PublishOutcome } from '../contract.js';
import { isOutcome } from '../core/batch-run.js';
import type { CallAbort } from '../core/call-abort.js';
import { acquireSlot, type Slots } from '../core/slots.js';
import {
  abortedAs,
  cancelledBeforeSend,
  classify,
  errorName,
  isNoResponders,
  linkInDoubt,
  noStreamCaptures,
} from './classify.js';
import { JetStreamProbe, LinkProbe } from './link.js';
import type { ClientItem, Prepared } from './wire.js';

export interface ClientModeOptions {
  /** Deadline of each PubAck, in ms. */
  readonly timeoutMs: number;
  /** The stream every message must land in (`expect: { streamName }`). */
  readonly stream: string | undefined;
  /** The publisher's in-flight window (a slot per publish awaiting its PubAck). */
  readonly slots: Slots;
  /** Counts a publish as in flight until it settled; `then` frees its slot. */
  readonly track: (attempt: Promise<unknown>, then: () => void) => void;
  /** Called when a publish got no responders: the stream may have vanished. */
  readonly onNoResponders: () => void;
}

/** The `client` mode on one connection. */
export class ClientMode {
  readonly #js: JetStreamClient;
  /** Whether the link is alive when a PubAck is overdue. */
  readonly #probe: LinkProbe;
  /** Whether JetStream answers when a publish gets no responders. */
  readonly #jetStream: JetStreamProbe;
  readonly #options: ClientModeOptions;

  constructor(nc: NatsConnection, options: ClientModeOptions) {
    this.#options = options;
    this.#js = jetstream(nc, { timeout: options.timeoutMs });
    this.#probe = new LinkProbe(nc, options.timeoutMs);
    this.#jetStream = new JetStreamProbe(nc, options.timeoutMs);
  }

  /** Publishes the items concurrently (outcomes pass through); one outcome per entry, in order. */
  publish(items: readonly (Prepared | PublishOutcome)[], abort: CallAbort): Promise<PublishOutcome[]> {
    return Promise.all(items.map((item) => (isOutcome(item) ? item : this.#send(item as ClientItem, abort))));
  }

  /** The client keeps its requests across a reconnect: nothing to do. */
  disconnected(): void {}

  reconnected(): void {}

  /** The publisher waits for the publishes it tracks. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  async #send(item: ClientItem, abort: CallAbort): Promise<PublishOutcome> {
    const { slots, timeoutMs, stream } = this.#options;
    if (!(await acquireSlot(slots, abort))) return failed(cancelledBeforeSend(item.subject), true);
    const options: Partial<JetStreamPublishOptions> = {
      msgID: item.eventId,
      headers: item.headers,
      timeout: timeoutMs,
    };
    if (stream !== undefined) options.expect = { streamName: stream };
    const attempt = this.#js.publish(item.subject, item.payload, options);
    this.#options.track(attempt, () => slots.release());
    try {
      await abort.race(attempt);
      return DELIVERED; // a PubAck with `duplicate: true` is the dedup working: delivered too
    } catch (raced) {
      const error = abortedAs(abort, raced);
      if (errorName(error) === 'TimeoutError') {
        // Charged only if the link is alive: a silent link is the broker's fault (see link.ts).
        const alive = await Promise.race([this.#probe.alive(), abort.aborted.catch(() => true)]);
        if (!alive) return failed(linkInDoubt(item.subject, timeoutMs, this.#probe.probeMs), true);
      }
      const published = this.#publishError(error, item.subject);
      // 503 on a live JetStream: no stream captures the subject, the event's failure (an attempt).
      const jsUp = isNoResponders(error) && this.#jetStream.up();
      if (jsUp && (await Promise.race([jsUp, abort.aborted.catch(() => false)]))) {
        return failed(noStreamCaptures(item.subject, error), true);
      }
      return failed(published, published.retryable);
    }
  }

  /** The verdict on a failed `js.publish()`. */
  #publishError(error: unknown, subject: string): PublishError {
    const verdict = classify(error, subject, this.#options.timeoutMs);
    // A stream that vanished (no responders) is re-created on the next batch when we manage it.
    if (verdict.retryable && isNoResponders(error)) this.#options.onNoResponders();
    return verdict;
  }
}
