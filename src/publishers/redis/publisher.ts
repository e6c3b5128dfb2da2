/**
 * Redis Streams publisher: one stream entry per event, appended with `XADD`, the
 * CloudEvents envelope as the entry's fields and the payload bytes as its `payload` field.
 * A batch goes out as one pipeline (every command written before any reply is read, no
 * MULTI/EXEC), and a small server-side script guards against appending a republished
 * event id twice. Needs the `redis` package (node-redis 5.x), an optional peer dependency.
 */
import type { RedisArgument } from 'redis';
import { errorMessage, PublishError } from '../../errors.js';
import { redactUrl } from '../../redact.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from '../contract.js';
import { CallAbort } from '../core/call-abort.js';
import { InFlight } from '../core/in-flight.js';
import { PublisherLifecycle } from '../core/lifecycle.js';
import {
  abortedBeforeReply,
  batchAborted,
  commandVerdict,
  isNoScript,
  noReplyInTime,
  notAvailable,
} from './classify.js';
import { closeOwnedClient, createOwnedClient, type OwnedClient } from './client.js';
import {
  type RedisClientLike,
  type RedisPublisherOptions,
  type ResolvedRedisOptions,
  resolveRedisOptions,
} from './options.js';
import { appendCommand, type Command, scriptLoad } from './wire.js';

/**
 * A {@link Publisher} for Redis Streams.
 *
 * Each message is appended to the stream `destination(message)` (default `message.topic`, else
 * `${aggregateType}.${type}`) as one entry. Redis Streams has no CloudEvents protocol binding;
 * the entry's fields follow the MQTT 5 binding's layout (binary content mode, attributes as
 * unprefixed user properties), in this order:
 * 1. the message's own headers (`traceparent`, `tracestate`, `x-…`), names and values as they are;
 * 2. the CloudEvents attributes, each under its own name, values raw UTF-8 (a field is
 *    binary-safe: nothing is encoded, every string arrives byte for byte): `specversion` (`1.0`),
 *    `id` (the event id), `source` (the `ceSource` option), `type`, `time` (RFC 3339, UTC, ms),
 *    `subject` (= the aggregate id), `datacontenttype`, `aggregatetype`, `aggregateid`,
 *    `sequence` (the Sequence extension: zero-padded to 19 digits, so it orders as a string),
 *    `aggregatesequence` (the same number, plain), `schemaversion`;
 * 3. `payload`: the data bytes, untouched (always the last field).
 * A header of the message named `payload`, or like an attribute in another case
 * (`AggregateSequence`), is not written: readers would take it for that field. `consumeRedis`
 * (through `fromEnvelope`) reads this layout and the `ce-*` fields tx-outbox 0.1 wrote.
 * All commands of a batch are written in one pipeline (one round trip, no MULTI/EXEC); one
 * connection keeps them in order, so per-aggregate order holds across batches.
 *
 * **Idempotency guard** (`dedupWindowMs`, default one day). Each message is appended by
 * a small Lua script (EVALSHA; loaded once per publisher in the first pipeline, reloaded
 * after a `NOSCRIPT`), which Redis runs atomically: if the guard key
 * `<keyPrefix>:dedup:<eventId>` exists, nothing is written and the entry id it holds is
 * returned — the republish counts as delivered; otherwise the script `XADD`s the entry, then
 * `SET`s the guard to the new entry id with an expiry of the window (same effect as
 * `SET … NX PX window` then `XADD`, but with the XADD first: a failing XADD — WRONGTYPE, OOM —
 * stops the script before anything was written, so no guard can exist without its entry).
 * Entry and guard are therefore written both or neither, and reach the AOF and the replicas
 * together (one MULTI/EXEC under effects replication). Exactly what this guarantees:
 * - Within the window, an event id is appended at most once, however often the relay
 *   republishes it (lost acks, timeouts, relay crashes). This holds per Redis primary.
 * - After the window the guard has expired: a republish appends a second entry. Make the
 *   window longer than an event can stay unacknowledged (relay downtime, backoff, a dead event
 *   replayed later) — and let consumers dedup by the `id` field anyway (the inbox does).
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
 * With `dedupWindowMs: 0` a plain `XADD` is sent: no script, no guard, a republished
 * event is appended again.
 *
 * **Outcomes.** An error reply about the message — WRONGTYPE (the key holds another type), any
 * other `ERR`, a `destination` function that throws or returns an empty key — fails permanently.
 * Retryable with code `BROKER_UNAVAILABLE` (the relay does not charge an attempt): connection
 * refused/closed/reset, the client reconnecting, no reply within `timeoutMs`, and replies that
 * say the server cannot take writes now (LOADING, READONLY, MASTERDOWN, BUSY, TRYAGAIN,
 * CLUSTERDOWN, NOREPLICAS, MISCONF, and OOM: maxmemory is a server-wide condition). A batch
 * aborted by the relay's signal fails its unanswered messages as retryable.
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
  return new RedisPublisher(resolveRedisOptions(options));
}

/** A command's end: `null` for a reply (any reply but an error means stored), its error, or the call's abort. */
type Result = Error | null | typeof ABORTED;

/** The call's abort (its deadline or the caller's signal) came before the reply. */
const ABORTED = Symbol('aborted');

class RedisPublisher implements Publisher {
  readonly name = 'redis';
  readonly #options: ResolvedRedisOptions;
  readonly #client: RedisClientLike;
  readonly #owned: OwnedClient | undefined;
  readonly #where: string;
  readonly #life = new PublisherLifecycle('Redis');
  readonly #inFlight = new InFlight();
  #scriptLoaded = false;
  #connecting: Promise<void> | undefined;
  #lastError: Error | undefined;

  readonly #onError = (error: Error): void => {
    // The client reconnects by itself; remembered only to explain the next failure.
    this.#lastError = error;
  };

  constructor(options: ResolvedRedisOptions) {
    this.#options = options;
    if (options.client !== undefined) {
      this.#client = options.client;
      this.#owned = undefined;
      this.#where = 'the given client';
    } else {
      const url = options.url!;
      const client = createOwnedClient(url, options.clientOptions, options.timeoutMs);
      this.#client = client;
      this.#owned = client;
      this.#where = redactUrl(url);
    }
    this.#client.on('error', this.#onError);
  }

  publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    try {
      this.#life.assertOpen();
    } catch (error) {
      return Promise.reject(error);
    }
    const run = this.#publish(batch, signal);
    this.#inFlight.track(run);
    return run;
  }

  close(): Promise<void> {
    return this.#life.close(() => this.#shutdown());
  }

  async #publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    const { destination, append, timeoutMs } = this.#options;
    const outcomes = new Array<PublishOutcome>(batch.length);
    let todo: Command[] = [];
    for (let index = 0; index < batch.length; index += 1) {
      const prepared = appendCommand(batch[index]!, index, destination, append);
      if ('args' in prepared) todo.push(prepared);
      else outcomes[index] = prepared;
    }
    if (todo.length === 0) return outcomes;
    const abort = new CallAbort({ signal, timeoutMs, timeoutMessage: `timed out after ${timeoutMs} ms` });
    try {
      try {
        await abort.race(this.#ready());
      } catch (error) {
        const outcome = failed(this.#notReady(error, abort), true);
        for (const command of todo) outcomes[command.index] = outcome;
        return outcomes;
      }
      // Two rounds at most: the second resends what met NOSCRIPT (script cache flushed by a
      // restart, failover or SCRIPT FLUSH), with the script loaded again in front.
      for (let round = 0; round < 2 && todo.length > 0; round += 1) {
        if (!this.#client.isReady) {
          const outcome = failed(
            this.#notReady(new Error('not connected; the client is reconnecting'), abort),
            true,
          );
          for (const command of todo) outcomes[command.index] = outcome;
          break;
        }
        const results = await this.#pipeline(todo, abort);
        const again: Command[] = [];
        for (let i = 0; i < todo.length; i += 1) {
          const command = todo[i]!;
          const result = results[i]!;
          if (result === null) {
            outcomes[command.index] = DELIVERED;
          } else if (round === 0 && result !== ABORTED && isNoScript(result)) {
            this.#scriptLoaded = false;
            again.push(command);
          } else {
            const error = this.#verdict(result, command, abort);
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
      abort.dispose();
    }
    return outcomes;
  }

  /**
   * Writes every command before reading any reply (node-redis writes what was queued in one
   * tick in one go), prefixed by SCRIPT LOAD when the script is not known to be loaded. Resolves
   * when every reply came, or when the call is aborted (the rest are then {@link ABORTED}).
   */
  #pipeline(commands: readonly Command[], abort: CallAbort): Promise<Result[]> {
    const client = this.#client;
    return new Promise<Result[]>((resolve) => {
      const results = new Array<Result | undefined>(commands.length);
      let left = commands.length;
      let done = false;
      let unsubscribe = (): void => undefined;
      const finish = (): void => {
        if (done) return;
        done = true;
        unsubscribe();
        resolve(results as Result[]);
      };
      const expire = (): void => {
        for (let i = 0; i < results.length; i += 1) {
          if (results[i] === undefined) results[i] = ABORTED;
        }
        finish();
      };
      const settle = (i: number, result: Result): void => {
        if (done || results[i] !== undefined) return;
        results[i] = result;
        left -= 1;
        if (left === 0) finish();
      };
      if (this.#options.append.window !== undefined && !this.#scriptLoaded) {
        send(client, scriptLoad()).then(
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
      unsubscribe = abort.onAbort(expire);
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
    if (!owned.isOpen && !this.#life.isClosed) {
      this.#connecting ??= owned
        .connect()
        .then(() => undefined)
        .finally(() => {
          this.#connecting = undefined;
        });
    }
    if (this.#connecting !== undefined) await this.#connecting;
  }

  #notReady(error: unknown, abort: CallAbort): PublishError {
    if (abort.cause === 'caller' && error === abort.reason) return batchAborted(error);
    return notAvailable(this.#where, error, this.#lastError);
  }

  /** The verdict on a command that did not get a success reply. */
  #verdict(result: Error | typeof ABORTED, command: Command, abort: CallAbort): PublishError {
    const what = `event ${command.eventId} on stream "${command.stream}"`;
    if (result !== ABORTED) return commandVerdict(result, what, this.#where);
    if (abort.cause === 'caller') return abortedBeforeReply(what, abort.reason);
    return noReplyInTime(what, this.#where, this.#options.timeoutMs, abort.reason);
  }

  async #shutdown(): Promise<void> {
    // Every publish in flight settles within timeoutMs (replies, errors or the deadline).
    await this.#inFlight.settled();
    const owned = this.#owned;
    if (owned === undefined) {
      this.#client.off('error', this.#onError);
      return;
    }
    // The error listener stays: a client being torn down may still report its socket's end.
    await closeOwnedClient(owned, this.#options.timeoutMs);
  }
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
