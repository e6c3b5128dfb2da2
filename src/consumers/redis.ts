/**
 * Redis Streams consumer adapter: a consumer group read with `XREADGROUP … BLOCK` on a
 * dedicated connection, every entry handled through the inbox (KeyedQueue keyed by
 * aggregate: bounded concurrency, one delivery of an aggregate at a time) and `XACK`ed
 * only after `inbox.handle` resolved, i.e. after the inbox transaction committed — for
 * every status but `deferred`. A deferred entry stays pending; a periodic `XAUTOCLAIM`
 * of entries idle longer than `claimIdleMs` hands it over again (and recovers the
 * pending entries of consumers that died). An entry without a tx-outbox envelope cannot
 * be deduplicated nor quarantined (no event id): it is logged and acknowledged.
 */
import { createClient, RESP_TYPES, type RedisArgument, type RedisClientOptions } from 'redis';
import { errorMessage } from '../errors.js';
import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { type Logger, silentLogger } from '../logger.js';
import { checkExactlyOne, checkInboxAndHandler, checkIntegers, checkNames } from '../options/checks.js';
import { PAYLOAD_FIELD } from '../publishers/redis/wire.js';
import { aggregateKey, type Consumer } from './consumer.js';
import { KeyedQueue } from './keyed-queue.js';

export type { Consumer } from './consumer.js';

type Client = ReturnType<typeof createClient>;

export interface RedisConsumerOptions<T = unknown> {
  readonly inbox: Inbox<T>;
  readonly handler: InboxHandler<T>;
  /** `redis[s]://…`; the adapter owns (and closes) its clients. */
  readonly url?: string;
  /**
   * An existing node-redis client instead of `url` (never closed by the adapter); it is
   * `duplicate()`d for the blocking reads.
   */
  readonly client?: Client;
  readonly clientOptions?: Omit<RedisClientOptions, 'url'>;
  readonly stream: string;
  readonly group: string;
  /** This instance's name in the group: unique per running instance. */
  readonly consumerName: string;
  /** Where a group created here starts: `0` (the whole stream, default) or `$` (new entries only). */
  readonly startId?: string;
  /** Entries handled at once (across aggregates). Default 16. */
  readonly concurrency?: number;
  /** BLOCK of each XREADGROUP, in ms. Default 1000. */
  readonly blockMs?: number;
  /** Pending entries idle longer than this are claimed again (deferred ones, those of dead consumers). Default 30 000. */
  readonly claimIdleMs?: number;
  /** How often XAUTOCLAIM runs, in ms. Default `claimIdleMs / 2` (at least 100). */
  readonly claimIntervalMs?: number;
  /** Aborting it stops the consumer (like `stop()`). */
  readonly signal?: AbortSignal;
  readonly logger?: Logger;
}

type Fields = Record<string, Buffer>;
interface Entry {
  readonly id: string;
  readonly fields: Fields | undefined;
}

const AS_BUFFERS = { typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer } } as const;

/**
 * Consumes a Redis stream through the inbox with a consumer group (created with
 * `XGROUP CREATE … MKSTREAM` if missing).
 *
 * @example
 * const consumer = await consumeRedis({ inbox, handler, url: 'redis://127.0.0.1:6379', stream: 'orders', group: 'inventory', consumerName: hostname() });
 */
export async function consumeRedis<T = unknown>(options: RedisConsumerOptions<T>): Promise<Consumer> {
  validate(options);
  const owned: Client[] = [];
  try {
    let main: Client;
    if (options.client) {
      main = options.client;
    } else {
      main = createClient({ ...options.clientOptions, url: options.url! });
      owned.push(main);
    }
    main.on('error', noop);
    const reader = main.duplicate();
    owned.push(reader);
    reader.on('error', noop);
    if (!main.isOpen) await main.connect();
    await reader.connect();
    try {
      await main.sendCommand([
        'XGROUP',
        'CREATE',
        options.stream,
        options.group,
        options.startId ?? '0',
        'MKSTREAM',
      ]);
    } catch (error) {
      if (!errorMessage(error).startsWith('BUSYGROUP')) throw error;
    }
    const consumer = new RedisConsumer(main, reader, owned, options);
    consumer.start();
    return consumer;
  } catch (error) {
    for (const c of owned) c.destroy();
    throw error;
  }
}

const noop = (): void => {};

function validate(options: RedisConsumerOptions<never>): void {
  checkInboxAndHandler(options);
  checkExactlyOne(
    'url',
    'client',
    options.url !== undefined && options.url !== '',
    options.client !== undefined,
  );
  checkNames(options, ['stream', 'group', 'consumerName']);
  checkIntegers(options, { concurrency: 1, blockMs: 1, claimIdleMs: 1, claimIntervalMs: 1 });
}

class RedisConsumer<T> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #concurrency: number;
  readonly #logger: Logger;
  /** Entry ids being handled here: a claim never hands them over twice. */
  readonly #handling = new Map<string, Promise<void>>();
  #loop: Promise<void> | undefined;
  #claimTimer: NodeJS.Timeout | undefined;
  #claiming: Promise<void> | undefined;
  #stopped = false;
  #stopping: Promise<void> | undefined;
  readonly #onAbort = (): void => void this.stop();

  constructor(
    private readonly main: Client,
    private readonly reader: Client,
    private readonly owned: Client[],
    private readonly o: RedisConsumerOptions<T>,
  ) {
    this.#concurrency = o.concurrency ?? 16;
    this.#queue = new KeyedQueue(this.#concurrency);
    this.#logger = o.logger ?? silentLogger;
  }

  start(): void {
    this.#loop = this.#run();
    const idle = this.o.claimIdleMs ?? 30_000;
    const every = this.o.claimIntervalMs ?? Math.max(100, Math.floor(idle / 2));
    this.#claimTimer = setInterval(() => {
      this.#claiming ??= this.#claim(idle).finally(() => {
        this.#claiming = undefined;
      });
    }, every);
    if (this.o.signal?.aborted) void this.stop();
    else this.o.signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  stop(): Promise<void> {
    this.#stopping ??= this.#shutdown();
    return this.#stopping;
  }

  async #shutdown(): Promise<void> {
    this.#stopped = true;
    this.o.signal?.removeEventListener('abort', this.#onAbort);
    clearInterval(this.#claimTimer);
    // Interrupts a blocked XREADGROUP; the reader is ours alone.
    this.reader.destroy();
    await this.#loop;
    await this.#claiming;
    while (this.#handling.size > 0) await Promise.all(this.#handling.values());
    for (const c of this.owned) {
      if (c === this.reader) continue;
      await c.close().catch(() => c.destroy());
    }
    this.main.off('error', noop);
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      try {
        while (this.#handling.size >= this.#concurrency * 2 && !this.#stopped)
          await Promise.race(this.#handling.values());
        if (this.#stopped) break;
        const reply = await this.reader.sendCommand(
          [
            'XREADGROUP',
            'GROUP',
            this.o.group,
            this.o.consumerName,
            'COUNT',
            String(this.#concurrency),
            'BLOCK',
            String(this.o.blockMs ?? 1000),
            'STREAMS',
            this.o.stream,
            '>',
          ],
          AS_BUFFERS,
        );
        for (const entry of readReply(reply)) this.#dispatch(entry);
      } catch (error) {
        if (this.#stopped) break;
        this.#logger.error({ err: error, stream: this.o.stream }, 'XREADGROUP failed; retrying');
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  /** XAUTOCLAIM pending entries idle longer than `idle` ms to this consumer, and handles them. */
  async #claim(idle: number): Promise<void> {
    try {
      let cursor = '0-0';
      for (let round = 0; round < 10 && !this.#stopped; round++) {
        const reply = (await this.main.sendCommand(
          [
            'XAUTOCLAIM',
            this.o.stream,
            this.o.group,
            this.o.consumerName,
            String(idle),
            cursor,
            'COUNT',
            String(this.#concurrency * 2),
          ] as RedisArgument[],
          AS_BUFFERS,
        )) as [Buffer, unknown, unknown?];
        for (const entry of readEntries(reply[1])) {
          if (this.#stopped) break;
          // Deleted (trimmed) while pending: nothing to handle, nothing to keep.
          if (entry.fields === undefined) await this.#ack(entry.id);
          else this.#dispatch(entry);
        }
        cursor = reply[0].toString();
        if (cursor === '0-0') break;
      }
    } catch (error) {
      if (!this.#stopped) this.#logger.error({ err: error, stream: this.o.stream }, 'XAUTOCLAIM failed');
    }
  }

  #dispatch(entry: Entry): void {
    if (this.#handling.has(entry.id) || entry.fields === undefined) return;
    const task = this.#deliver(entry.id, entry.fields).finally(() => this.#handling.delete(entry.id));
    this.#handling.set(entry.id, task);
  }

  async #deliver(id: string, fields: Fields): Promise<void> {
    let message: InboxMessage;
    try {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(fields))
        if (name !== PAYLOAD_FIELD) headers[name] = value.toString('utf8');
      message = fromEnvelope(headers, fields[PAYLOAD_FIELD] ?? Buffer.alloc(0));
    } catch (error) {
      this.#logger.error(
        { stream: this.o.stream, entryId: id, reason: `no tx-outbox envelope: ${errorMessage(error)}` },
        'entry acknowledged without handling',
      );
      await this.#ack(id);
      return;
    }
    try {
      const result = await this.#queue.run(aggregateKey(message), () =>
        this.o.inbox.handle(message, this.o.handler),
      );
      if (result.status !== 'deferred') await this.#ack(id);
    } catch (error) {
      // The inbox itself failed (database down …): nothing committed; the entry stays pending.
      this.#logger.error({ err: error, eventId: message.eventId }, 'inbox failed; entry stays pending');
    }
  }

  async #ack(id: string): Promise<void> {
    try {
      await this.main.sendCommand(['XACK', this.o.stream, this.o.group, id]);
    } catch (error) {
      // Left pending: claimed again later and deduplicated by the inbox.
      this.#logger.warn({ err: error, entryId: id }, 'XACK failed');
    }
  }
}

/** XREADGROUP reply, RESP2 (`[[stream, entries]]`) or RESP3 (map stream → entries). */
function readReply(reply: unknown): Entry[] {
  if (reply === null || reply === undefined) return [];
  if (reply instanceof Map) return [...reply.values()].flatMap(readEntries);
  if (Array.isArray(reply)) return reply.flatMap((s) => readEntries((s as [unknown, unknown])[1]));
  return Object.values(reply as Record<string, unknown>).flatMap(readEntries);
}

function readEntries(list: unknown): Entry[] {
  if (!Array.isArray(list)) return [];
  return list.map((raw) => {
    const [id, flat] = raw as [Buffer, Buffer[] | null];
    if (!Array.isArray(flat)) return { id: id.toString(), fields: undefined };
    const fields: Fields = {};
    for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i]!.toString()] = flat[i + 1]!;
    return { id: id.toString(), fields };
  });
}
