/**
 * Redis Streams publisher: one stream entry per event, appended with `XADD`, the
 * CloudEvents envelope as the entry's fields and the payload bytes as its `payload` field.
 * A batch goes out as one pipeline (every command written before any reply is read, no
 * MULTI/EXEC), and a small server-side script guards against appending a republished
 * event id twice. Needs the `redis` package (node-redis 5.x), an optional peer dependency.
 */
import { createHash } from 'node:crypto';
import { createClient, ErrorReply, type RedisArgument, type RedisClientOptions } from 'redis';
import { BROKER_UNAVAILABLE, errorMessage, OutboxValidationError, PublishError } from '../errors.js';
import { checkPositiveInteger } from '../options/checks.js';
import { redactText, redactUrl } from '../redact.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from './contract.js';
import { asBuffer } from './core/bytes.js';
import { publisherClosed } from './core/closed.js';
import { defaultDestination } from './core/destination.js';
import { permanent } from './core/outcomes.js';
import { envelopeHeaders } from './envelope.js';

/** Name of the stream-entry field that carries the payload bytes (the other fields are the envelope). */
export const PAYLOAD_FIELD = 'payload';

/**
 * The part of a node-redis client (`createClient()` from `redis` 5.x) the publisher uses.
 * A single-node (or Sentinel-primary) client; Redis Cluster is not supported (see
 * {@link redisPublisher}).
 */
export interface RedisClientLike {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  sendCommand(args: ReadonlyArray<RedisArgument>): Promise<unknown>;
  on(event: 'error', listener: (error: Error) => void): unknown;
  off(event: 'error', listener: (error: Error) => void): unknown;
}

/** Stream length cap applied by every `XADD` (`MAXLEN ~ count`, or `MAXLEN = count` when not approximate). */
export interface RedisMaxLen {
  readonly count: number;
  /** `~`: Redis trims whole macro nodes, much cheaper; the stream may hold a few more entries. Default true. */
  readonly approximate?: boolean;
}

/** Options of {@link redisPublisher}. Give `url` or an existing `client`. */
export interface RedisPublisherOptions {
  /** `redis[s]://[[user][:password]@]host[:port][/db]`. The publisher owns (and closes) this client. */
  readonly url?: string;
  /**
   * An existing, connected (or connecting) node-redis client to use instead of `url`; the
   * publisher never connects or closes it. Its offline queue is bypassed: while it is not
   * ready, publishes fail at once as `BROKER_UNAVAILABLE`.
   */
  readonly client?: RedisClientLike;
  /** Extra options for the client made from `url` (TLS, credentials, reconnect strategy …). */
  readonly clientOptions?: Omit<RedisClientOptions, 'url' | 'disableOfflineQueue'>;
  /** Stream key of a message. Default: `message.topic`, else `${aggregateType}.${type}`. */
  readonly stream?: (message: OutboxMessage) => string;
  /** Caps every stream this publisher appends to. Default: no trimming. */
  readonly maxLen?: RedisMaxLen;
  /**
   * How long, in seconds, a republished event id is recognised and not appended again.
   * Default 86 400 (one day); 0 disables the guard (a plain `XADD`, no script, no guard keys).
   */
  readonly dedupWindowSeconds?: number;
  /** Prefix of the guard keys: `<keyPrefix>:dedup:<eventId>`. Default `tx-outbox`. */
  readonly keyPrefix?: string;
  /** CloudEvents `source` attribute. Default `tx-outbox`. */
  readonly source?: string;
  /** Deadline for connecting and for the replies of a batch, in ms. Default 10 000. */
  readonly timeoutMs?: number;
}

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_DEDUP_WINDOW_SECONDS = 86_400;
const DEFAULT_KEY_PREFIX = 'tx-outbox';

/**
 * KEYS[1] stream, KEYS[2] guard; ARGV[1] window (s), ARGV[2] MAXLEN count or '', ARGV[3] '~'
 * or '=', ARGV[4..] field/value pairs. The XADD is the script's first write: if it fails
 * (WRONGTYPE, OOM …) the script stops before anything was written, so the entry and its
 * guard are written both or neither (Redis scripts do not roll back earlier writes).
 */
const APPEND_SCRIPT = `local old = redis.call('GET', KEYS[2])
if old then return {0, old} end
local id
if ARGV[2] == '' then
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
else
  id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[3], ARGV[2], '*', unpack(ARGV, 4))
end
redis.call('SET', KEYS[2], id, 'EX', ARGV[1])
return {1, id}`;

const APPEND_SHA = createHash('sha1').update(APPEND_SCRIPT).digest('hex');

/**
 * A {@link Publisher} for Redis Streams.
 *
 * Each message is appended to the stream `stream(message)` (default `message.topic`, else
 * `${aggregateType}.${type}`) as one entry whose fields are the envelope — the user headers
 * (`traceparent`, `tracestate` …) and the CloudEvents attributes `ce-id` (event id),
 * `ce-type`, `ce-source`, `ce-time`, `ce-subject`, `ce-datacontenttype`, `ce-aggregatetype`,
 * `ce-aggregateid`, `ce-sequence`, `ce-schemaversion`, `ce-specversion` — followed by the
 * payload bytes, untouched, in the field `payload` (a user header of that name is dropped).
 * All commands of a batch are written in one pipeline (one round trip, no MULTI/EXEC); one
 * connection keeps them in order, so per-aggregate order holds across batches.
 *
 * **Idempotency guard** (`dedupWindowSeconds`, default one day). Each message is appended by
 * a small Lua script (EVALSHA; loaded once per publisher in the first pipeline, reloaded
 * after a `NOSCRIPT`), which Redis runs atomically: if the guard key
 * `<keyPrefix>:dedup:<eventId>` exists, nothing is written and the entry id it holds is
 * returned — the republish counts as delivered; otherwise the script `XADD`s the entry, then
 * `SET`s the guard to the new entry id with an expiry of the window (same effect as
 * `SET … NX EX window` then `XADD`, but with the XADD first: a failing XADD — WRONGTYPE, OOM —
 * stops the script before anything was written, so no guard can exist without its entry).
 * Entry and guard are therefore written both or neither, and reach the AOF and the replicas
 * together (one MULTI/EXEC under effects replication). Exactly what this guarantees:
 * - Within the window, an event id is appended at most once, however often the relay
 *   republishes it (lost acks, timeouts, relay crashes). This holds per Redis primary.
 * - After the window the guard has expired: a republish appends a second entry. Make the
 *   window longer than an event can stay unacknowledged (relay downtime, backoff, a dead event
 *   replayed later) — and let consumers dedup by `ce-id` anyway (the inbox does).
 * - Trimming (`maxLen`, `XTRIM`) or deleting the stream leaves the guards: a republish within
 *   the window is still reported delivered, with the old entry id, and not appended again.
 * - Redis acknowledges writes held in memory. Without persistence a restart loses the streams
 *   and the guards alike; with AOF `everysec` the last second of them; after a failover to an
 *   asynchronously replicated replica, what had not reached it. Entry and guard are lost
 *   together, so the guard never hides a lost entry from a republish — but the relay already
 *   took the acknowledgement and will not republish: such an event is gone from Redis (the
 *   "persistent" guarantee is Redis's own: AOF `appendfsync always`, `min-replicas-to-write`).
 * - Guards are ordinary keys with a TTL, about 150 bytes each: one per event published in the
 *   last window (10 million events a day with the default window: ~1.5 GB). Under an
 *   `allkeys-*` or `volatile-*` eviction policy Redis may evict them early (then duplicates are
 *   possible); use `noeviction` for streams you rely on.
 * - Script and guard touch two keys that Redis Cluster would place in different slots:
 *   Redis Cluster is not supported.
 * With `dedupWindowSeconds: 0` a plain `XADD` is sent: no script, no guard, a republished
 * event is appended again.
 *
 * **Outcomes.** An error reply about the message — WRONGTYPE (the key holds another type), any
 * other `ERR`, a `stream` function that throws or returns an empty key — fails permanently.
 * Retryable with code `BROKER_UNAVAILABLE` (the relay does not charge an attempt): connection
 * refused/closed/reset, the client reconnecting, no reply within `timeoutMs`, and replies that
 * say the server cannot take writes now (LOADING, READONLY, MASTERDOWN, BUSY, TRYAGAIN,
 * CLUSTERDOWN, NOREPLICAS, MISCONF, and OOM: maxmemory is a server-wide condition). A batch aborted by the relay's signal fails its unanswered messages as retryable.
 *
 * **Never hangs.** The client made from `url` has its offline queue disabled: commands are
 * refused while it reconnects instead of being kept; the replies of a batch are awaited at most
 * `timeoutMs`, after which the unanswered messages fail as `BROKER_UNAVAILABLE` (a late reply is
 * ignored; a republish is caught by the guard). Reconnecting is the client's job (node-redis
 * retries forever with a back-off capped at about 2 s); the publisher keeps an `error` listener
 * on the client so a lost connection never crashes the process.
 *
 * `close()` is idempotent: it waits for publishes in flight (each settles within `timeoutMs`),
 * then closes a client made from `url` (a given client is left open); later publishes reject
 * with an OutboxError `TXO_PUBLISHER_CLOSED`.
 *
 * @example
 * const publisher = redisPublisher({ url: 'redis://127.0.0.1:6379', maxLen: { count: 1_000_000, approximate: true } });
 */
export function redisPublisher(options: RedisPublisherOptions): Publisher {
  validateOptions(options);
  return new RedisPublisher(options);
}

/** `message.topic`, else `${aggregateType}.${type}`. */
export const defaultStream: (message: OutboxMessage) => string = defaultDestination;

function validateOptions(options: RedisPublisherOptions): void {
  const hasUrl = options.url !== undefined && options.url !== '';
  if (!hasUrl && options.client === undefined) {
    throw new OutboxValidationError('url', 'is missing', 'Give `url` (redis://host:port) or a `client`');
  }
  if (hasUrl && options.client !== undefined) {
    throw new OutboxValidationError('client', 'was given together with `url`', 'Give only one of them');
  }
  if (options.clientOptions !== undefined && options.client !== undefined) {
    throw new OutboxValidationError(
      'clientOptions',
      'only apply to the client made from `url`',
      'Configure your own client yourself',
    );
  }
  checkPositiveInteger('timeoutMs', options.timeoutMs);
  const window = options.dedupWindowSeconds;
  if (window !== undefined && !(Number.isInteger(window) && window >= 0)) {
    throw new OutboxValidationError(
      'dedupWindowSeconds',
      `must be a whole number of seconds >= 0, got ${window}`,
      'Use 0 to disable the guard',
    );
  }
  const maxLen = options.maxLen;
  if (maxLen !== undefined && !(Number.isInteger(maxLen.count) && maxLen.count > 0)) {
    throw new OutboxValidationError(
      'maxLen.count',
      `must be a positive integer, got ${maxLen.count}`,
      'Fix the option, or omit maxLen to keep every entry',
    );
  }
  if (options.keyPrefix !== undefined && options.keyPrefix === '') {
    throw new OutboxValidationError('keyPrefix', 'is empty', 'Omit it for the default `tx-outbox`');
  }
}

/** The node-redis client the publisher made from `url`. */
interface OwnedClient extends RedisClientLike {
  connect(): Promise<unknown>;
  close(): Promise<void>;
  destroy(): void;
}

/** A message ready to send. */
interface Command {
  readonly index: number;
  readonly eventId: string;
  readonly stream: string;
  readonly args: RedisArgument[];
}

/** How a command ended: `null` for a reply (any reply but an error means stored), or the error. */
type Result = Error | null;

class RedisPublisher implements Publisher {
  readonly name = 'redis';
  readonly #client: RedisClientLike;
  readonly #owned: OwnedClient | undefined;
  readonly #where: string;
  readonly #stream: (message: OutboxMessage) => string;
  readonly #source: string;
  readonly #timeoutMs: number;
  readonly #window: string | undefined;
  readonly #guardPrefix: string;
  readonly #trimCount: string;
  readonly #trimMode: string;
  readonly #inFlight = new Set<Promise<unknown>>();
  #scriptLoaded = false;
  #connecting: Promise<void> | undefined;
  #lastError: Error | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;

  readonly #onError = (error: Error): void => {
    // The client reconnects by itself; remembered only to explain the next failure.
    this.#lastError = error;
  };

  constructor(options: RedisPublisherOptions) {
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#stream = options.stream ?? defaultStream;
    this.#source = options.source ?? 'tx-outbox';
    const window = options.dedupWindowSeconds ?? DEFAULT_DEDUP_WINDOW_SECONDS;
    this.#window = window > 0 ? String(window) : undefined;
    this.#guardPrefix = `${options.keyPrefix ?? DEFAULT_KEY_PREFIX}:dedup:`;
    this.#trimCount = options.maxLen === undefined ? '' : String(options.maxLen.count);
    this.#trimMode = options.maxLen?.approximate === false ? '=' : '~';
    if (options.client !== undefined) {
      this.#client = options.client;
      this.#owned = undefined;
      this.#where = 'the given client';
    } else {
      const url = options.url!;
      let client: OwnedClient;
      try {
        client = createClient({
          ...options.clientOptions,
          socket: { connectTimeout: this.#timeoutMs, ...options.clientOptions?.socket },
          url,
          // Commands are refused while reconnecting instead of queued for later.
          disableOfflineQueue: true,
        }) as unknown as OwnedClient;
      } catch (error) {
        throw new OutboxValidationError(
          'url',
          `is not a valid Redis URL (${redactText(errorMessage(error))})`,
          'Fix it',
        );
      }
      this.#client = client;
      this.#owned = client;
      this.#where = redactUrl(url);
    }
    this.#client.on('error', this.#onError);
  }

  publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closed) {
      return Promise.reject(publisherClosed('Redis'));
    }
    const run = this.#publish(batch, signal);
    const settled = run.then(
      () => undefined,
      () => undefined,
    );
    this.#inFlight.add(settled);
    void settled.then(() => this.#inFlight.delete(settled));
    return run;
  }

  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  async #publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const outcomes = new Array<PublishOutcome>(batch.length);
    let todo: Command[] = [];
    for (let index = 0; index < batch.length; index += 1) {
      const prepared = this.#prepare(batch[index]!, index);
      if ('args' in prepared) todo.push(prepared);
      else outcomes[index] = prepared;
    }
    if (todo.length === 0) return outcomes;
    const deadline = new Deadline(this.#timeoutMs, signal);
    try {
      try {
        await deadline.race(this.#ready());
      } catch (error) {
        const outcome = failed(this.#notReady(error), true);
        for (const command of todo) outcomes[command.index] = outcome;
        return outcomes;
      }
      // Two rounds at most: the second resends what met NOSCRIPT (script cache flushed by a
      // restart, failover or SCRIPT FLUSH), with the script loaded again in front.
      for (let round = 0; round < 2 && todo.length > 0; round += 1) {
        if (!this.#client.isReady) {
          const outcome = failed(
            this.#notReady(new Error('not connected; the client is reconnecting')),
            true,
          );
          for (const command of todo) outcomes[command.index] = outcome;
          break;
        }
        const results = await this.#pipeline(todo, deadline);
        const again: Command[] = [];
        for (let i = 0; i < todo.length; i += 1) {
          const command = todo[i]!;
          const result = results[i] as Result;
          if (result === null) {
            outcomes[command.index] = DELIVERED;
          } else if (round === 0 && isNoScript(result)) {
            this.#scriptLoaded = false;
            again.push(command);
          } else {
            const error = this.#verdict(result, command);
            outcomes[command.index] = failed(error, error.retryable);
          }
        }
        todo = again;
      }
    } catch (error) {
      // Not expected; still one outcome per message, never a throw.
      const outcome = failed(
        new PublishError(`Redis publish failed: ${errorMessage(error)}`, { retryable: true, cause: error }),
        true,
      );
      for (const command of todo) outcomes[command.index] ??= outcome;
    } finally {
      deadline.dispose();
    }
    return outcomes;
  }

  /** Stream key and arguments; a message Redis would refuse outright gets its permanent outcome here. */
  #prepare(message: OutboxMessage, index: number): Command | PublishOutcome {
    let stream: string;
    try {
      stream = this.#stream(message);
    } catch (error) {
      return permanent(
        `The stream function threw for event ${message.eventId}: ${errorMessage(error)}`,
        error,
      );
    }
    if (typeof stream !== 'string' || stream === '') {
      return permanent(
        `Invalid stream key ${JSON.stringify(stream)} for event ${message.eventId}: it must be a non-empty string`,
      );
    }
    const args: RedisArgument[] =
      this.#window === undefined
        ? this.#trimCount === ''
          ? ['XADD', stream, '*']
          : ['XADD', stream, 'MAXLEN', this.#trimMode, this.#trimCount, '*']
        : [
            'EVALSHA',
            APPEND_SHA,
            '2',
            stream,
            this.#guardPrefix + message.eventId,
            this.#window,
            this.#trimCount,
            this.#trimMode,
          ];
    const envelope = envelopeHeaders(message, this.#source);
    for (const field in envelope) {
      if (field !== PAYLOAD_FIELD) args.push(field, envelope[field]!);
    }
    const { payload } = message;
    args.push(PAYLOAD_FIELD, asBuffer(payload));
    return { index, eventId: message.eventId, stream, args };
  }

  /**
   * Writes every command before reading any reply (node-redis writes what was queued in one
   * tick in one go), prefixed by SCRIPT LOAD when the script is not known to be loaded. Resolves
   * when every reply came, or when the deadline passes (the rest then carry its error).
   */
  #pipeline(commands: readonly Command[], deadline: Deadline): Promise<Result[]> {
    const client = this.#client;
    return new Promise<Result[]>((resolve) => {
      const results = new Array<Result | undefined>(commands.length);
      let left = commands.length;
      let done = false;
      const finish = (): void => {
        if (done) return;
        done = true;
        deadline.off(expire);
        resolve(results as Result[]);
      };
      const expire = (reason: Error): void => {
        for (let i = 0; i < results.length; i += 1) {
          if (results[i] === undefined) results[i] = reason;
        }
        finish();
      };
      const settle = (i: number, result: Result): void => {
        if (done || results[i] !== undefined) return;
        results[i] = result;
        left -= 1;
        if (left === 0) finish();
      };
      if (this.#window !== undefined && !this.#scriptLoaded) {
        send(client, ['SCRIPT', 'LOAD', APPEND_SCRIPT]).then(
          () => {
            this.#scriptLoaded = true;
          },
          () => undefined, // the EVALSHAs behind it fail with NOSCRIPT and are resent
        );
      }
      for (let i = 0; i < commands.length; i += 1) {
        send(client, commands[i]!.args).then(
          () => settle(i, null),
          (error: unknown) => settle(i, asError(error)),
        );
      }
      deadline.on(expire);
    });
  }

  /** Connects the client made from `url` (once; node-redis reconnects by itself afterwards). */
  async #ready(): Promise<void> {
    const client = this.#client;
    if (client.isReady) return;
    const owned = this.#owned;
    if (owned === undefined) {
      if (!client.isOpen) throw new Error('the given client is not open (call its connect() first)');
      return; // reconnecting: the caller fails the batch fast
    }
    if (!owned.isOpen && !this.#closed) {
      this.#connecting ??= owned
        .connect()
        .then(() => undefined)
        .finally(() => {
          this.#connecting = undefined;
        });
    }
    if (this.#connecting !== undefined) await this.#connecting;
  }

  #notReady(error: unknown): PublishError {
    if (error instanceof AbortedError) return error.forBatch();
    const last =
      this.#lastError === undefined ? '' : ` (last client error: ${errorMessage(this.#lastError)})`;
    return new PublishError(`Redis is not available (${this.#where}): ${errorMessage(error)}${last}`, {
      retryable: true,
      code: BROKER_UNAVAILABLE,
      cause: error,
    });
  }

  /** The verdict on a command that did not get a success reply. */
  #verdict(error: Error, command: Command): PublishError {
    const what = `event ${command.eventId} on stream "${command.stream}"`;
    if (error instanceof AbortedError) return error.forMessage(what);
    if (error instanceof DeadlineError) {
      return new PublishError(
        `No reply from Redis (${this.#where}) within ${this.#timeoutMs} ms for ${what}; it may have been stored (a republish is deduplicated)`,
        { retryable: true, code: BROKER_UNAVAILABLE, cause: error },
      );
    }
    if (!isErrorReply(error)) {
      // Connection refused/reset/closed, client offline or closed, socket timeout …
      return new PublishError(`Redis is not available (${this.#where}) for ${what}: ${errorMessage(error)}`, {
        retryable: true,
        code: BROKER_UNAVAILABLE,
        cause: error,
      });
    }
    const code = replyCode(error.message);
    if (UNAVAILABLE_REPLIES.has(code)) {
      return new PublishError(`Redis cannot take writes now (${what}): ${error.message}`, {
        retryable: true,
        code: BROKER_UNAVAILABLE,
        cause: error,
      });
    }
    if (RETRYABLE_REPLIES.has(code)) {
      return new PublishError(`Redis refused ${what} for now: ${error.message}`, {
        retryable: true,
        cause: error,
      });
    }
    return new PublishError(`Redis refused ${what}: ${error.message}`, { retryable: false, cause: error });
  }

  async #shutdown(): Promise<void> {
    this.#closed = true;
    // Every publish in flight settles within timeoutMs (replies, errors or the deadline).
    await Promise.allSettled([...this.#inFlight]);
    const owned = this.#owned;
    if (owned === undefined) {
      this.#client.off('error', this.#onError);
      return;
    }
    // The error listener stays: a client being torn down may still report its socket's end.
    if (!owned.isOpen) return;
    if (owned.isReady) {
      // Waits for replies still due (late ones of timed-out batches), at most timeoutMs.
      let timer: NodeJS.Timeout | undefined;
      const closed = await Promise.race([
        owned.close().then(
          () => true,
          () => false,
        ),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), this.#timeoutMs);
        }),
      ]);
      clearTimeout(timer);
      if (closed) return;
    }
    try {
      owned.destroy(); // connecting, or a close that did not finish
    } catch {
      // already closed
    }
  }
}

/** Reply codes saying the server cannot take writes now: not the message's fault. */
const UNAVAILABLE_REPLIES: ReadonlySet<string> = new Set([
  'LOADING',
  'READONLY',
  'MASTERDOWN',
  'BUSY',
  'TRYAGAIN',
  'CLUSTERDOWN',
  'NOREPLICAS',
  'MISCONF',
  // maxmemory reached: a server-wide condition, so events that did nothing wrong are not
  // charged attempts (and dead-lettered) while it lasts.
  'OOM',
]);

/** Reply codes a retry may cure, charged as an attempt. */
const RETRYABLE_REPLIES: ReadonlySet<string> = new Set(['NOSCRIPT']);

/**
 * The error code of a reply: its first word. Redis 7 passes a script's failing command's
 * error through (`WRONGTYPE … script: <sha>, on @user_script:1.`); Redis 6 wraps it in
 * `ERR Error running script (call to f_<sha>): @user_script:5: WRONGTYPE …`.
 */
function replyCode(message: string): string {
  if (message.startsWith('ERR Error running script')) {
    const inner = /@user_script:\d+: (-?)([A-Z]+) /.exec(message);
    if (inner !== null) return inner[2]!;
  }
  const space = message.indexOf(' ');
  return space === -1 ? message : message.slice(0, space);
}

function isErrorReply(error: Error): boolean {
  // instanceof fails when the client comes from another copy of @redis/client.
  return error instanceof ErrorReply || /^(ErrorReply|SimpleError|BlobError)$/.test(error.constructor.name);
}

function isNoScript(error: Error): boolean {
  return isErrorReply(error) && error.message.startsWith('NOSCRIPT');
}

function send(client: RedisClientLike, args: RedisArgument[]): Promise<unknown> {
  try {
    return client.sendCommand(args);
  } catch (error) {
    return Promise.reject(error);
  }
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/** The batch's deadline passed. */
class DeadlineError extends Error {
  override readonly name = 'TimeoutError';
}

/** The relay aborted the batch. */
class AbortedError extends Error {
  override readonly name = 'AbortError';

  forBatch(): PublishError {
    return new PublishError(`Redis publish aborted: ${this.message}`, { retryable: true, cause: this });
  }

  forMessage(what: string): PublishError {
    return new PublishError(`Publish of ${what} aborted before Redis replied: ${this.message}`, {
      retryable: true,
      cause: this,
    });
  }
}

/** One timer and one abort listener per batch, whatever the number of messages waiting on it. */
class Deadline {
  readonly #listeners = new Set<(reason: Error) => void>();
  readonly #timer: NodeJS.Timeout;
  readonly #signal: AbortSignal;
  readonly #onAbort = (): void => this.#expire(new AbortedError(errorMessage(this.#signal.reason)));
  #reason: Error | undefined;

  constructor(timeoutMs: number, signal: AbortSignal) {
    this.#signal = signal;
    this.#timer = setTimeout(
      () => this.#expire(new DeadlineError(`timed out after ${timeoutMs} ms`)),
      timeoutMs,
    );
    if (signal.aborted) this.#onAbort();
    else signal.addEventListener('abort', this.#onAbort, { once: true });
  }

  /** Calls `listener` once when the deadline passes or the batch is aborted (at once if it has). */
  on(listener: (reason: Error) => void): void {
    if (this.#reason !== undefined) listener(this.#reason);
    else this.#listeners.add(listener);
  }

  off(listener: (reason: Error) => void): void {
    this.#listeners.delete(listener);
  }

  /** Settles like `promise`, or rejects with the deadline's reason first. */
  race<T>(promise: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const expire = (reason: Error): void => reject(reason);
      this.on(expire);
      promise.then(
        (value) => {
          this.off(expire);
          resolve(value);
        },
        (error: unknown) => {
          this.off(expire);
          reject(error);
        },
      );
    });
  }

  dispose(): void {
    clearTimeout(this.#timer);
    this.#signal.removeEventListener('abort', this.#onAbort);
    this.#listeners.clear();
  }

  #expire(reason: Error): void {
    if (this.#reason !== undefined) return;
    this.#reason = reason;
    clearTimeout(this.#timer);
    for (const listener of [...this.#listeners]) listener(reason);
    this.#listeners.clear();
  }
}
