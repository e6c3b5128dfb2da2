/**
 * NATS JetStream publisher. Every message carries the event id as `Nats-Msg-Id`, so the
 * stream's duplicate window turns the relay's at-least-once retries into one stored copy.
 * The CloudEvents envelope travels in the message headers; the payload bytes are sent
 * untouched.
 *
 * Two ways to publish, same outcomes: `pipeline` (default) sends core NATS publishes with
 * reply subjects and matches the PubAcks on one wildcard subscription (see
 * nats-pipeline.ts); `client` uses the official client's `jetstream(nc).publish()`.
 */
import {
  type JetStreamClient,
  type JetStreamPublishOptions,
  jetstream,
  jetstreamManager,
  StorageType,
  type StreamInfo,
} from '@nats-io/jetstream';
import {
  connect,
  type MsgHdrs,
  type NatsConnection,
  type NodeConnectionOptions,
  nanos,
} from '@nats-io/transport-node';
import { errorMessage, OutboxValidationError, type PublishError } from '../errors.js';
import { checkPositiveInteger } from '../options/checks.js';
import { redactUrl } from '../redact.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from './contract.js';
import { type AbortWatch, watchAbort } from './core/abort-watch.js';
import { connectError, publisherClosed } from './core/closed.js';
import { raceDeadline } from './core/deadline.js';
import { permanent } from './core/outcomes.js';
import { Slots } from './core/slots.js';
import { envelopeHeaders } from './envelope.js';
import { JetStreamProbe, LinkProbe } from './nats-link.js';
import { AckPipeline, type PipelineItem } from './nats-pipeline.js';
import {
  apiErrorCode,
  asUnavailable,
  buildHeaders,
  cancelledBeforeSend,
  classify,
  defaultSubject,
  encodeHeaders,
  errorName,
  isNoResponders,
  linkInDoubt,
  noStreamCaptures,
  payloadProblem,
  subjectProblem,
} from './nats-shared.js';

export { defaultSubject, subjectProblem };

/** How {@link natsPublisher} publishes; both give the same outcomes. */
export type NatsPublishMode = 'pipeline' | 'client';

/** Options of {@link natsPublisher}. Give `servers` or an existing `connection`. */
export interface NatsPublisherOptions {
  /** Server URL(s), e.g. `nats://127.0.0.1:4222`. The publisher owns (and closes) this connection. */
  readonly servers?: string | string[];
  /** An existing connection to use instead of `servers`; the publisher never closes it. */
  readonly connection?: NatsConnection;
  /** Extra client options for the connection made from `servers` (auth, TLS, name …). */
  readonly connectionOptions?: Omit<NodeConnectionOptions, 'servers'>;
  /**
   * Stream every message must land in: publishes carry `expect: { streamName }`, so a subject
   * captured by another stream (or none) is refused by the server instead of stored elsewhere.
   */
  readonly stream?: string;
  /** With `stream`: the stream is created at first use if missing (file storage) with these subjects. */
  readonly streamSubjects?: readonly string[];
  /** Duplicate window of a stream this publisher creates. Default 2 minutes. */
  readonly duplicateWindowMs?: number;
  /** Subject of a message. Default: `message.topic`, else `${aggregateType}.${type}`. */
  readonly subject?: (message: OutboxMessage) => string;
  /** CloudEvents `source` attribute. Default `tx-outbox`. */
  readonly source?: string;
  /** Deadline for connecting and for each PubAck, in ms. Default 10 000. */
  readonly timeoutMs?: number;
  /** Upper bound of publishes awaiting their PubAck, across concurrent batches. Default 1024. */
  readonly maxInFlight?: number;
  /**
   * `pipeline` (default): core NATS publishes with a reply subject each, all PubAcks on one
   * wildcard subscription: several times the throughput of `client`, which publishes with
   * the official client's `js.publish()` (a request per message), kept for comparison and
   * as a fallback.
   */
  readonly mode?: NatsPublishMode;
}

/** Options of {@link ensureStream}. */
export interface EnsureStreamOptions {
  readonly name: string;
  readonly subjects: readonly string[];
  /** Duplicate window (dedup by `Nats-Msg-Id`) in ms. Default 2 minutes. */
  readonly duplicateWindowMs?: number;
  /** Deadline of each JetStream API request, in ms. Default 10 000. */
  readonly timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_IN_FLIGHT = 1024;
const DEFAULT_DUPLICATE_WINDOW_MS = 120_000;
const STREAM_NOT_FOUND = 10059;
const STREAM_NAME_IN_USE = 10058;

/**
 * Creates the stream if it does not exist (file storage, the given duplicate window) and
 * returns its info. An existing stream is left as it is. With server URL(s) instead of a
 * connection, a temporary connection is opened and closed.
 */
export async function ensureStream(
  target: NatsConnection | string | string[],
  options: EnsureStreamOptions,
): Promise<StreamInfo> {
  if (typeof target === 'string' || Array.isArray(target)) {
    const nc = await connect({ servers: target, timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS });
    try {
      return await ensureStream(nc, options);
    } finally {
      await nc.close();
    }
  }
  const jsm = await jetstreamManager(target, { timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS });
  try {
    return await jsm.streams.info(options.name);
  } catch (error) {
    if (apiErrorCode(error) !== STREAM_NOT_FOUND) throw error;
  }
  const config = {
    name: options.name,
    subjects: [...options.subjects],
    storage: StorageType.File,
    duplicate_window: nanos(options.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS),
  };
  try {
    return await jsm.streams.add(config);
  } catch (error) {
    // Another process created it between our look-up and our add.
    if (apiErrorCode(error) === STREAM_NAME_IN_USE) return await jsm.streams.info(options.name);
    throw error;
  }
}

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
 * const publisher = natsPublisher({ servers: 'nats://127.0.0.1:4222', stream: 'ORDERS', streamSubjects: ['order.>'] });
 */
export function natsPublisher(options: NatsPublisherOptions): Publisher {
  validateOptions(options);
  return new NatsPublisher(options);
}

function validateOptions(options: NatsPublisherOptions): void {
  const hasServers = options.servers !== undefined && options.servers.length > 0;
  if (!hasServers && options.connection === undefined) {
    throw new OutboxValidationError(
      'servers',
      'is missing',
      'Give `servers` (URL or URLs) or a `connection`',
    );
  }
  if (hasServers && options.connection !== undefined) {
    throw new OutboxValidationError(
      'connection',
      'was given together with `servers`',
      'Give only one of them',
    );
  }
  if (options.streamSubjects !== undefined && options.stream === undefined) {
    throw new OutboxValidationError('stream', 'is missing', 'Name the stream that `streamSubjects` describe');
  }
  if (options.streamSubjects !== undefined && options.streamSubjects.length === 0) {
    throw new OutboxValidationError('streamSubjects', 'is empty', 'List at least one subject or omit it');
  }
  checkPositiveInteger('timeoutMs', options.timeoutMs);
  checkPositiveInteger('maxInFlight', options.maxInFlight);
  checkPositiveInteger('duplicateWindowMs', options.duplicateWindowMs);
  if (options.mode !== undefined && options.mode !== 'pipeline' && options.mode !== 'client') {
    throw new OutboxValidationError(
      'mode',
      `must be 'pipeline' or 'client', got ${String(options.mode)}`,
      'Fix the option',
    );
  }
}

interface Session {
  readonly nc: NatsConnection;
  /** In `client` mode. */
  readonly js?: JetStreamClient;
  /** In `client` mode: whether the link is alive when a PubAck is overdue. */
  readonly probe?: LinkProbe;
  /** In `client` mode: whether JetStream answers when a publish gets no responders. */
  readonly jetStream?: JetStreamProbe;
  /** In `pipeline` mode. */
  readonly pipeline?: AckPipeline;
}

/**
 * A message ready to send: its subject and headers were built without errors. In `pipeline`
 * mode the encoded header block (`Nats-Msg-Id` and expected stream included), in `client`
 * mode the envelope headers (the client adds `Nats-Msg-Id` and the expected stream).
 */
type Prepared = PipelineItem | ClientItem;

interface ClientItem {
  readonly subject: string;
  readonly payload: Uint8Array;
  readonly eventId: string;
  readonly headers: MsgHdrs;
}

class NatsPublisher implements Publisher {
  readonly name = 'nats';
  readonly #options: NatsPublisherOptions;
  readonly #pipelined: boolean;
  readonly #timeoutMs: number;
  readonly #source: string;
  readonly #slots: Slots;
  readonly #inFlight = new Set<Promise<unknown>>();
  #session: Session | undefined;
  #connecting: Promise<Session> | undefined;
  #streamReady = false;
  /** True between a `disconnect` status and the next `reconnect`: publishes fail fast as unavailable. */
  #disconnected = false;
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(options: NatsPublisherOptions) {
    this.#options = options;
    this.#pipelined = (options.mode ?? 'pipeline') === 'pipeline';
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#source = options.source ?? 'tx-outbox';
    this.#slots = new Slots(options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closed) {
      throw publisherClosed('NATS');
    }
    const prepared = batch.map((message) => this.#prepare(message));
    if (!prepared.some(isPrepared)) return prepared.filter(isOutcome);
    const abort = watchAbort(signal);
    try {
      let session: Session;
      try {
        session = await raceDeadline(this.#ensureSession(), this.#timeoutMs, abort.aborted);
      } catch (error) {
        const outcome = failed(this.#connectError(error), true);
        return prepared.map((item) => (isPrepared(item) ? outcome : item));
      }
      if (this.#disconnected) {
        const outcome = failed(
          this.#connectError(new Error('disconnected; the client is reconnecting')),
          true,
        );
        return prepared.map((item) => (isPrepared(item) ? outcome : item));
      }
      const maxPayload = session.nc.info?.max_payload;
      const ready = prepared.map((item) =>
        isPrepared(item) ? (payloadProblem(item.payload.length, item.subject, maxPayload) ?? item) : item,
      );
      const outcomes = session.pipeline
        ? await session.pipeline.publish(ready as (PipelineItem | PublishOutcome)[], signal)
        : await Promise.all(
            ready.map((item) => (isPrepared(item) ? this.#send(session, item as ClientItem, abort) : item)),
          );
      // Publishes that timed out because the connection dropped meanwhile are the broker's fault too.
      return this.#disconnected ? outcomes.map(asUnavailable) : outcomes;
    } finally {
      abort.dispose();
    }
  }

  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  /** Builds subject and headers; a message NATS would refuse gets its permanent outcome here. */
  #prepare(message: OutboxMessage): Prepared | PublishOutcome {
    let subject: string;
    try {
      subject = this.#options.subject ? this.#options.subject(message) : defaultSubject(message);
    } catch (error) {
      return permanent(
        `The subject function threw for event ${message.eventId}: ${errorMessage(error)}`,
        error,
      );
    }
    const problem = subjectProblem(subject);
    if (problem !== undefined) {
      return permanent(`NATS rejects subject "${subject}" (event ${message.eventId}): it ${problem}`);
    }
    const { eventId, payload } = message;
    try {
      const envelope = envelopeHeaders(message, this.#source);
      return this.#pipelined
        ? { subject, payload, headers: encodeHeaders(envelope, eventId, this.#options.stream) }
        : { subject, payload, eventId, headers: buildHeaders(envelope) };
    } catch (error) {
      return permanent(`Invalid header for subject "${subject}": ${errorMessage(error)}`, error);
    }
  }

  /** `client` mode: one `js.publish()` per message, at most maxInFlight awaiting their PubAck. */
  async #send(session: Session, item: ClientItem, abort: AbortWatch): Promise<PublishOutcome> {
    const acquired =
      !abort.signal.aborted && (await this.#slots.acquire((cancel) => abort.aborted.catch(cancel)));
    if (!acquired) return failed(cancelledBeforeSend(item.subject), true);
    const options: Partial<JetStreamPublishOptions> = {
      msgID: item.eventId,
      headers: item.headers,
      timeout: this.#timeoutMs,
    };
    if (this.#options.stream !== undefined) options.expect = { streamName: this.#options.stream };
    const probe = session.probe!;
    const attempt = session.js!.publish(item.subject, item.payload, options);
    this.#track(attempt);
    try {
      await Promise.race([attempt, abort.aborted]);
      return DELIVERED; // a PubAck with `duplicate: true` is the dedup working: delivered too
    } catch (error) {
      if (errorName(error) === 'TimeoutError') {
        // Charged only if the link is alive: a silent link is the broker's fault (see nats-link.ts).
        const alive = await Promise.race([probe.alive(), abort.aborted.catch(() => true)]);
        if (!alive) return failed(linkInDoubt(item.subject, this.#timeoutMs, probe.probeMs), true);
      }
      const published = this.#publishError(error, item.subject);
      // 503 on a live JetStream: no stream captures the subject, the event's failure (an attempt).
      const jsUp = isNoResponders(error) && session.jetStream!.up();
      if (jsUp && (await Promise.race([jsUp, abort.aborted.catch(() => false)]))) {
        return failed(noStreamCaptures(item.subject, error), true);
      }
      return failed(published, published.retryable);
    }
  }

  /** Counts a publish as in flight (holding a slot) until the server answered or it timed out. */
  #track(attempt: Promise<unknown>): void {
    const settled = attempt.then(
      () => undefined,
      () => undefined,
    );
    this.#inFlight.add(settled);
    void settled.then(() => {
      this.#inFlight.delete(settled);
      this.#slots.release();
    });
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
    let session = this.#session;
    if (session === undefined || session.nc.isClosed()) {
      const nc = this.#options.connection ?? (await this.#connect());
      session = this.#pipelined
        ? {
            nc,
            pipeline: new AckPipeline(nc, {
              timeoutMs: this.#timeoutMs,
              maxInFlight: this.#options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT,
              // A stream that vanished is re-created on the next batch when we manage it.
              onNoResponders: () => {
                this.#streamReady = false;
              },
            }),
          }
        : {
            nc,
            js: jetstream(nc, { timeout: this.#timeoutMs }),
            probe: new LinkProbe(nc, this.#timeoutMs),
            jetStream: new JetStreamProbe(nc, this.#timeoutMs),
          };
      this.#watchStatus(session);
      this.#session = session;
      if (this.#closed) {
        await this.#closeOwned(nc);
        throw publisherClosed('NATS');
      }
    }
    if (!this.#streamReady) {
      const { stream, streamSubjects } = this.#options;
      if (stream !== undefined && streamSubjects !== undefined) {
        const { duplicateWindowMs, timeoutMs } = this.#options;
        await ensureStream(session.nc, {
          name: stream,
          subjects: streamSubjects,
          duplicateWindowMs,
          timeoutMs,
        });
      }
      this.#streamReady = true;
    }
    return session;
  }

  #connect(): Promise<NatsConnection> {
    return connect({
      name: 'tx-outbox',
      timeout: this.#timeoutMs,
      maxReconnectAttempts: -1,
      ...this.#options.connectionOptions,
      servers: this.#options.servers,
    });
  }

  /**
   * Follows the connection's status so an outage is known without waiting for timeouts: new
   * publishes fail fast, and the pipeline fails the publishes whose PubAck is lost.
   */
  #watchStatus({ nc, pipeline }: Session): void {
    this.#disconnected = false;
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect' || status.type === 'reconnecting' || status.type === 'close') {
          this.#disconnected = true;
          pipeline?.disconnected();
        } else if (status.type === 'reconnect') {
          this.#disconnected = false;
          pipeline?.reconnected();
        }
      }
    })().catch(() => undefined);
  }

  #connectError(error: unknown): PublishError {
    const { servers } = this.#options;
    return connectError(
      'NATS',
      servers === undefined ? 'the given connection' : redactServers(servers),
      error,
    );
  }

  /** `client` mode: the verdict on a failed `js.publish()`. */
  #publishError(error: unknown, subject: string): PublishError {
    const verdict = classify(error, subject, this.#timeoutMs);
    // A stream that vanished (no responders) is re-created on the next batch when we manage it.
    if (verdict.retryable && isNoResponders(error)) this.#streamReady = false;
    return verdict;
  }

  async #shutdown(): Promise<void> {
    this.#closed = true;
    this.#slots.close();
    // Every in-flight publish settles within timeoutMs (PubAck, error or client timeout).
    await Promise.allSettled([...this.#inFlight, this.#session?.pipeline?.close()]);
    // A connect still under way is not awaited: #openSession closes its connection on arrival.
    const nc = this.#session?.nc;
    if (nc !== undefined) await this.#closeOwned(nc);
  }

  /** Drains (bounded by timeoutMs), then closes, a connection this publisher opened. */
  async #closeOwned(nc: NatsConnection): Promise<void> {
    if (this.#options.connection !== undefined || nc.isClosed()) return;
    await raceDeadline(nc.drain(), this.#timeoutMs).catch(() => undefined);
    if (!nc.isClosed()) await nc.close().catch(() => undefined);
  }
}

/** Server URLs for an error message, without passwords or query values. */
function redactServers(servers: string | string[]): string {
  const list = typeof servers === 'string' ? [servers] : servers;
  return list.map(redactUrl).join(', ');
}

function isPrepared(item: Prepared | PublishOutcome): item is Prepared {
  return 'subject' in item;
}

function isOutcome(item: Prepared | PublishOutcome): item is PublishOutcome {
  return !isPrepared(item);
}
