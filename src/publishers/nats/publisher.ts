/**
 * NATS JetStream publisher. Every message carries the event id as `Nats-Msg-Id`, so the
 * stream's duplicate window turns the relay's at-least-once retries into one stored copy.
 * The CloudEvents envelope travels in the message headers as the NATS binding says (binary
 * mode, see wire.ts); the payload bytes are sent untouched.
 *
 * Two ways to publish, same outcomes: `pipeline` (default) sends core NATS publishes with
 * reply subjects and matches the PubAcks on one wildcard subscription (see pipeline.ts);
 * `client` uses the official client's `jetstream(nc).publish()` (see client-mode.ts).
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { PublishError } from '../../errors.js';
import { failed, type OutboxMessage, type Publisher, type PublishOutcome } from '../contract.js';
import { isOutcome } from '../core/batch-run.js';
import { CallAbort } from '../core/call-abort.js';
import { connectError } from '../core/closed.js';
import { raceDeadline } from '../core/deadline.js';
import { InFlight } from '../core/in-flight.js';
import { closeWithin, PublisherLifecycle } from '../core/lifecycle.js';
import { Slots } from '../core/slots.js';
import { abortedAs, asUnavailable } from './classify.js';
import { ClientMode } from './client-mode.js';
import { type NatsPublisherOptions, type ResolvedNatsOptions, resolveNatsOptions } from './options.js';
import { AckPipeline } from './pipeline.js';
import { ensureStream } from './stream.js';
import { type Prepared, payloadProblem, prepareMessage } from './wire.js';

/**
 * A {@link Publisher} for NATS JetStream. Connects lazily at the first publish; once
 * connected the client reconnects forever on its own. If NATS is down, a publish fails
 * as retryable within `timeoutMs` and the next publish tries to connect again, so a
 * publisher created while NATS is down starts working as soon as NATS is back.
 *
 * Outcomes: a subject NATS refuses, a payload over the server's `max_payload`, or a
 * subject outside the expected `stream` fail permanently; timeouts, no responders (no
 * stream captures the subject: an attempt; JetStream not answering: unavailable), lost
 * connections and any other error are retryable.
 * A PubAck flagged `duplicate` counts as delivered.
 *
 * `close()` is idempotent: it waits for in-flight publishes (each settles within
 * `timeoutMs`), then drains and closes the connection it opened; later publishes reject
 * with an OutboxError `TXO_PUBLISHER_CLOSED`.
 *
 * @example
 * const publisher = natsPublisher({ url: 'nats://127.0.0.1:4222', stream: 'ORDERS', streamSubjects: ['order.>'] });
 */
export function natsPublisher(options: NatsPublisherOptions): Publisher {
  return new NatsPublisher(resolveNatsOptions(options));
}

/** How a connection publishes: the pipeline or the official client (the same outcomes). */
interface Sender {
  publish(items: readonly (Prepared | PublishOutcome)[], abort: CallAbort): Promise<PublishOutcome[]>;
  /** The connection dropped: what awaits a PubAck fails now, as the broker's fault. */
  disconnected(): void;
  reconnected(): void;
  /** Stops sending; resolves when what was sent is settled. */
  close(): Promise<void>;
}

interface Session {
  readonly nc: NatsConnection;
  readonly sender: Sender;
}

class NatsPublisher implements Publisher {
  readonly name = 'nats';
  readonly #options: ResolvedNatsOptions;
  readonly #life = new PublisherLifecycle('NATS');
  /** The `client` mode's in-flight window, across its connections. */
  readonly #slots: Slots;
  /** The `client` mode's publishes awaiting their PubAck (the pipeline keeps its own). */
  readonly #inFlight = new InFlight();
  #session: Session | undefined;
  #connecting: Promise<Session> | undefined;
  #streamReady = false;
  /** True between a `disconnect` status and the next `reconnect`: publishes fail fast as unavailable. */
  #disconnected = false;

  constructor(options: ResolvedNatsOptions) {
    this.#options = options;
    this.#slots = new Slots(options.maxInFlight);
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.#life.assertOpen();
    const options = this.#options;
    const prepared = batch.map((message) => prepareMessage(message, options));
    if (prepared.every(isOutcome)) return prepared;
    const abort = new CallAbort({ signal });
    try {
      let session: Session;
      try {
        session = await raceDeadline(this.#ensureSession(), options.timeoutMs, abort.aborted);
      } catch (error) {
        const outcome = failed(this.#connectError(abortedAs(abort, error)), true);
        return prepared.map((item) => (isOutcome(item) ? item : outcome));
      }
      if (this.#disconnected) {
        const outcome = failed(
          this.#connectError(new Error('disconnected; the client is reconnecting')),
          true,
        );
        return prepared.map((item) => (isOutcome(item) ? item : outcome));
      }
      const maxPayload = session.nc.info?.max_payload;
      // In place: the array is this call's own.
      for (let i = 0; i < prepared.length; i++) {
        const item = prepared[i]!;
        if (!isOutcome(item))
          prepared[i] = payloadProblem(item.payload.length, item.subject, maxPayload) ?? item;
      }
      const outcomes = await session.sender.publish(prepared, abort);
      // Publishes that timed out because the connection dropped meanwhile are the broker's fault too.
      return this.#disconnected ? outcomes.map(asUnavailable) : outcomes;
    } finally {
      abort.dispose();
    }
  }

  close(): Promise<void> {
    return this.#life.close(() => this.#shutdown());
  }

  #ensureSession(): Promise<Session> {
    if (this.#session !== undefined && !this.#session.nc.isClosed() && this.#streamReady) {
      return Promise.resolve(this.#session);
    }
    this.#connecting ??= this.#openSession().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  async #openSession(): Promise<Session> {
    const options = this.#options;
    let session = this.#session;
    if (session === undefined || session.nc.isClosed()) {
      const nc = options.client ?? (await this.#connect());
      session = { nc, sender: this.#sender(nc) };
      this.#watchStatus(session);
      this.#session = session;
      if (this.#life.isClosed) {
        await this.#closeOwned(nc);
        this.#life.assertOpen();
      }
    }
    if (!this.#streamReady) {
      const { stream, streamSubjects, dedupWindowMs, timeoutMs } = options;
      if (stream !== undefined && streamSubjects !== undefined) {
        await ensureStream(session.nc, {
          name: stream,
          subjects: streamSubjects,
          dedupWindowMs,
          timeoutMs,
        });
      }
      this.#streamReady = true;
    }
    return session;
  }

  #sender(nc: NatsConnection): Sender {
    const { pipelined, timeoutMs, maxInFlight, stream } = this.#options;
    // A stream that vanished (no responders) is re-created on the next batch when we manage it.
    const onNoResponders = (): void => {
      this.#streamReady = false;
    };
    return pipelined
      ? new AckPipeline(nc, { timeoutMs, maxInFlight, onNoResponders })
      : new ClientMode(nc, {
          timeoutMs,
          stream,
          slots: this.#slots,
          track: (attempt, then) => this.#inFlight.track(attempt, then),
          onNoResponders,
        });
  }

  #connect(): Promise<NatsConnection> {
    const { timeoutMs, clientOptions, url } = this.#options;
    return connect({
      name: 'tx-outbox',
      timeout: timeoutMs,
      maxReconnectAttempts: -1,
      ...clientOptions,
      servers: url,
    });
  }

  /**
   * Follows the connection's status so an outage is known without waiting for timeouts: new
   * publishes fail fast, and the pipeline fails the publishes whose PubAck is lost.
   */
  #watchStatus({ nc, sender }: Session): void {
    this.#disconnected = false;
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect' || status.type === 'reconnecting' || status.type === 'close') {
          this.#disconnected = true;
          sender.disconnected();
        } else if (status.type === 'reconnect') {
          this.#disconnected = false;
          sender.reconnected();
        }
      }
    })().catch(() => undefined);
  }

  #connectError(error: unknown): PublishError {
    return connectError('NATS', this.#options.where, error);
  }

  async #shutdown(): Promise<void> {
    this.#slots.close();
    // Every in-flight publish settles within timeoutMs (PubAck, error or client timeout).
    await Promise.allSettled([this.#inFlight.settled(), this.#session?.sender.close()]);
    // A connect still under way is not awaited: #openSession closes its connection on arrival.
    const nc = this.#session?.nc;
    if (nc !== undefined) await this.#closeOwned(nc);
  }

  /** Drains (bounded by timeoutMs), then closes, a connection this publisher opened. */
  async #closeOwned(nc: NatsConnection): Promise<void> {
    if (this.#options.client !== undefined || nc.isClosed()) return;
    await closeWithin(nc.drain(), this.#options.timeoutMs);
    if (!nc.isClosed()) await nc.close().catch(() => undefined);
  }
}
