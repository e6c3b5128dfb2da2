/**
 * NATS JetStream publisher. Every message is published with the official client
 * (`jetstream(nc).publish`) using the event id as `Nats-Msg-Id`, so the stream's
 * duplicate window turns the relay's at-least-once retries into one stored copy.
 * The CloudEvents envelope travels in the message headers; the payload bytes are
 * sent untouched.
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
  headers as natsHeaders,
} from '@nats-io/transport-node';
import {
  BROKER_UNAVAILABLE,
  errorMessage,
  OutboxError,
  OutboxValidationError,
  PublishError,
} from '../errors.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from './contract.js';
import { envelopeHeaders } from './envelope.js';

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
/** JetStream API error codes that a retry cannot cure. */
const PERMANENT_API_ERRORS: ReadonlyMap<number, string> = new Map([
  [10060, 'the subject is not captured by the expected stream'],
  [10054, "the message exceeds the stream's max_msg_size"],
]);

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
 * stream / server restarting), lost connections and any other error are retryable.
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
}

function checkPositiveInteger(field: string, value: number | undefined): void {
  if (value !== undefined && (!Number.isInteger(value) || value <= 0)) {
    throw new OutboxValidationError(field, `must be a positive integer, got ${value}`, 'Fix the option');
  }
}

interface Session {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
}

/** A message ready to send: its subject and publish options were built without errors. */
interface Prepared {
  readonly subject: string;
  readonly payload: Uint8Array;
  readonly options: Partial<JetStreamPublishOptions>;
}

class NatsPublisher implements Publisher {
  readonly name = 'nats';
  readonly #options: NatsPublisherOptions;
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
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#source = options.source ?? 'tx-outbox';
    this.#slots = new Slots(options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT);
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closed) {
      throw new OutboxError('The NATS publisher is closed', { code: 'TXO_PUBLISHER_CLOSED' });
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
      const outcomes = await Promise.all(
        prepared.map((item) => (isPrepared(item) ? this.#send(session, item, abort) : item)),
      );
      // Publishes that timed out because the connection dropped meanwhile are the broker's fault too.
      return this.#disconnected ? outcomes.map((o) => (o.ok ? o : asUnavailable(o))) : outcomes;
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
    let headers: MsgHdrs;
    try {
      headers = buildHeaders(envelopeHeaders(message, this.#source));
    } catch (error) {
      return permanent(`Invalid header for subject "${subject}": ${errorMessage(error)}`, error);
    }
    const options: Partial<JetStreamPublishOptions> = {
      msgID: message.eventId,
      headers,
      timeout: this.#timeoutMs,
    };
    if (this.#options.stream !== undefined) options.expect = { streamName: this.#options.stream };
    return { subject, payload: message.payload, options };
  }

  async #send(session: Session, item: Prepared, abort: AbortWatch): Promise<PublishOutcome> {
    const maxPayload = session.nc.info?.max_payload;
    if (maxPayload !== undefined && item.payload.length > maxPayload) {
      return permanent(
        `Payload of ${item.payload.length} bytes for subject "${item.subject}" exceeds the server's ` +
          `max_payload of ${maxPayload} bytes`,
      );
    }
    if (!(await this.#slots.acquire(abort))) {
      return failed(
        new PublishError(`Publish to "${item.subject}" was cancelled before sending`, { retryable: true }),
        true,
      );
    }
    const attempt = session.js.publish(item.subject, item.payload, item.options);
    this.#track(attempt);
    try {
      await Promise.race([attempt, abort.aborted]);
      return DELIVERED; // a PubAck with `duplicate: true` is the dedup working: delivered too
    } catch (error) {
      const published = this.#publishError(error, item.subject);
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
      this.#watchStatus(nc);
      session = { nc, js: jetstream(nc, { timeout: this.#timeoutMs }) };
      this.#session = session;
      if (this.#closed) {
        await this.#closeOwned(nc);
        throw new OutboxError('The NATS publisher is closed', { code: 'TXO_PUBLISHER_CLOSED' });
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

  /** Follows the connection's status so an outage is known without waiting for timeouts. */
  #watchStatus(nc: NatsConnection): void {
    this.#disconnected = false;
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type === 'disconnect' || status.type === 'reconnecting') this.#disconnected = true;
        else if (status.type === 'reconnect') this.#disconnected = false;
      }
    })().catch(() => undefined);
  }

  #connectError(error: unknown): PublishError {
    if (error instanceof OutboxError && error.code === 'TXO_PUBLISHER_CLOSED') {
      return new PublishError('The NATS publisher was closed while connecting', {
        retryable: true,
        cause: error,
      });
    }
    const { servers } = this.#options;
    const where = servers === undefined ? 'the given connection' : redactServers(servers);
    return new PublishError(`NATS is not available (${where}): ${errorMessage(error)}`, {
      retryable: true,
      code: BROKER_UNAVAILABLE,
      cause: error,
    });
  }

  #publishError(error: unknown, subject: string): PublishError {
    const verdict = classify(error, subject, this.#timeoutMs);
    // A stream that vanished (no responders) is re-created on the next batch when we manage it.
    if (verdict.retryable && errorName(error) === 'JetStreamNotEnabled') this.#streamReady = false;
    return verdict;
  }

  async #shutdown(): Promise<void> {
    this.#closed = true;
    this.#slots.close();
    // Every in-flight publish settles within timeoutMs (PubAck, error or client timeout).
    await Promise.allSettled([...this.#inFlight]);
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

function permanent(message: string, cause?: unknown): PublishOutcome {
  return failed(new PublishError(message, { retryable: false, cause }), false);
}

/** Server URLs for an error message, without any user:password part. */
function redactServers(servers: string | string[]): string {
  const list = typeof servers === 'string' ? [servers] : servers;
  return list.map((url) => url.replace(/\/\/[^/@]*@/, '//***@')).join(', ');
}

function isPrepared(item: Prepared | PublishOutcome): item is Prepared {
  return 'subject' in item;
}

function isOutcome(item: Prepared | PublishOutcome): item is PublishOutcome {
  return !isPrepared(item);
}

/** `message.topic`, else `${aggregateType}.${type}`. */
export function defaultSubject(message: OutboxMessage): string {
  return message.topic !== null && message.topic !== ''
    ? message.topic
    : `${message.aggregateType}.${message.type}`;
}

/** Why NATS would refuse to publish on `subject`, or undefined when it is fine. */
export function subjectProblem(subject: string): string | undefined {
  if (subject.length === 0) return 'is empty';
  if (/\s/.test(subject)) return 'contains whitespace';
  const tokens = subject.split('.');
  if (tokens.some((token) => token.length === 0))
    return 'has an empty token (leading, trailing or double dot)';
  if (tokens.some((token) => token === '*' || token === '>')) return 'contains a wildcard token (* or >)';
  return undefined;
}

function buildHeaders(values: Record<string, string>): MsgHdrs {
  const headers = natsHeaders();
  for (const [key, value] of Object.entries(values)) headers.set(key, value);
  return headers;
}

function asUnavailable(outcome: Extract<PublishOutcome, { ok: false }>): PublishOutcome {
  if (!outcome.retryable) return outcome;
  const error = new PublishError(`${outcome.error.message} (the connection to NATS dropped)`, {
    retryable: true,
    code: BROKER_UNAVAILABLE,
    cause: outcome.error,
  });
  return failed(error, true);
}

/** Maps a client or server error to a PublishError naming the subject. */
function classify(error: unknown, subject: string, timeoutMs: number): PublishError {
  const name = errorName(error);
  const detail = errorMessage(error);
  const apiCode = apiErrorCode(error);
  const reason = apiCode === undefined ? undefined : PERMANENT_API_ERRORS.get(apiCode);
  if (reason !== undefined) {
    return new PublishError(`JetStream refused subject "${subject}": ${reason} (${detail})`, {
      retryable: false,
      cause: error,
    });
  }
  if (name === 'InvalidSubjectError') {
    return new PublishError(`NATS rejects subject "${subject}": ${detail}`, {
      retryable: false,
      cause: error,
    });
  }
  if (name === 'InvalidArgumentError' && detail.includes('max_payload')) {
    return new PublishError(
      `Message for subject "${subject}" exceeds the server's max_payload (with headers)`,
      {
        retryable: false,
        cause: error,
      },
    );
  }
  return new PublishError(retryableMessage(name, detail, subject, timeoutMs), {
    retryable: true,
    ...(UNAVAILABLE_ERRORS.has(name) || /disconnect|connection (closed|refused)/i.test(detail)
      ? { code: BROKER_UNAVAILABLE }
      : {}),
    cause: error,
  });
}

/**
 * Client errors that say the server (or its JetStream) cannot be reached: the relay retries
 * them without charging the event an attempt.
 */
const UNAVAILABLE_ERRORS: ReadonlySet<string> = new Set([
  'ConnectionError',
  'ClosedConnectionError',
  'DrainingConnectionError',
  'NoResponders',
  'JetStreamNotEnabled',
]);

function retryableMessage(name: string, detail: string, subject: string, timeoutMs: number): string {
  if (name === 'TimeoutError')
    return `Timed out after ${timeoutMs} ms waiting for the PubAck of "${subject}"`;
  if (name === 'JetStreamNotEnabled' || name === 'NoResponders') {
    return `No JetStream stream answered for subject "${subject}" (503 no responders: stream missing or server restarting)`;
  }
  if (name === 'AbortError') return `Publish to "${subject}" aborted before its PubAck arrived`;
  return `Publish to "${subject}" failed: ${detail}`;
}

function errorName(error: unknown): string {
  return error instanceof Error ? error.name : '';
}

function apiErrorCode(error: unknown): number | undefined {
  // JetStreamApiError and its subclasses (StreamNotFoundError …) carry the server's err_code.
  if (!(error instanceof Error) || !('apiError' in error)) return undefined;
  const code = (error as { code?: unknown }).code;
  return typeof code === 'number' ? code : undefined;
}

interface AbortWatch {
  readonly signal: AbortSignal;
  /** Rejects with an AbortError when the signal aborts; never resolves. */
  readonly aborted: Promise<never>;
  dispose(): void;
}

/** One abort listener per batch, however many messages race against it. */
function watchAbort(signal: AbortSignal): AbortWatch {
  let onAbort = (): void => undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => {
      const error = new Error(`Aborted: ${errorMessage(signal.reason)}`, { cause: signal.reason });
      error.name = 'AbortError';
      reject(error);
    };
  });
  aborted.catch(() => undefined); // observed even when no message is waiting
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  return { signal, aborted, dispose: () => signal.removeEventListener('abort', onAbort) };
}

/** Settles like `promise`, or rejects on timeout or when `aborted` rejects, whichever comes first. */
function raceDeadline<T>(promise: Promise<T>, timeoutMs: number, aborted?: Promise<never>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = new Error(`Timed out after ${timeoutMs} ms`);
      error.name = 'TimeoutError';
      reject(error);
    }, timeoutMs);
  });
  const racers = aborted === undefined ? [promise, deadline] : [promise, deadline, aborted];
  return Promise.race(racers).finally(() => clearTimeout(timer));
}

/** A counting semaphore whose waiters give up on abort or close. */
class Slots {
  #free: number;
  /** Insertion-ordered: the longest waiter gets the next free slot. */
  readonly #waiters = new Set<(acquired: boolean) => void>();
  #closed = false;

  constructor(size: number) {
    this.#free = size;
  }

  /** Resolves true with a slot held, or false when the batch was aborted or the pool closed. */
  acquire(abort: AbortWatch): Promise<boolean> {
    if (this.#closed || abort.signal.aborted) return Promise.resolve(false);
    if (this.#free > 0) {
      this.#free -= 1;
      return Promise.resolve(true);
    }
    return new Promise<boolean>((resolve) => {
      const wake = (acquired: boolean): void => {
        if (this.#waiters.delete(wake)) resolve(acquired);
      };
      this.#waiters.add(wake);
      abort.aborted.catch(() => wake(false));
    });
  }

  release(): void {
    const next = this.#waiters.values().next();
    if (next.done) this.#free += 1;
    else next.value(true);
  }

  close(): void {
    this.#closed = true;
    for (const wake of this.#waiters) wake(false);
  }
}
