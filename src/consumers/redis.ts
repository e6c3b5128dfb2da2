/**
 * Redis Streams consumer adapter: a consumer group read with `XREADGROUP … BLOCK` on a
 * dedicated connection, every entry handled through the inbox (KeyedQueue keyed by
 * aggregate: bounded concurrency, one delivery of an aggregate at a time) and `XACK`ed
 * only after `inbox.handle` resolved, i.e. after the inbox transaction committed — for
 * every status but `deferred`. A deferred entry stays pending; a periodic `XAUTOCLAIM`
 * of entries idle longer than `claimIdleMs` hands it over again (and recovers the
 * pending entries of consumers that died). An entry's fields (all but `payload`) are read by
 * `fromEnvelope`: the unprefixed attribute fields the publisher writes (`id`, `source` …, see
 * `redisPublisher`) and the `ce-*` fields of tx-outbox 0.1, so entries of a relay not yet
 * upgraded read the same. An entry without a tx-outbox envelope cannot be deduplicated nor
 * quarantined (no event id): it is logged and acknowledged.
 */
import type { PoolClient } from 'pg';
import { createClient, RESP_TYPES, type RedisArgument } from 'redis';
import { isEnvelopeName, repeatedHeader } from '../envelope/read.js';
import { errorMessage } from '../errors.js';
import { fromEnvelope, type InboxMessage } from '../inbox/message.js';
import { PAYLOAD_FIELD } from '../publishers/redis/wire.js';
import { noteDelivery } from '../tracing/process-span.js';
import { aggregateKey, type Consumer } from './consumer.js';
import { KeyedQueue } from './keyed-queue.js';
import { ConsumerLifecycle } from './lifecycle.js';
import {
  type RedisClient as Client,
  type RedisConsumerOptions,
  type ResolvedRedisConsumerOptions,
  resolveRedisConsumerOptions,
} from './redis-options.js';

export type { Consumer } from './consumer.js';
export type { RedisConsumerOptions } from './redis-options.js';

type Fields = Record<string, Buffer>;
interface Entry {
  readonly id: string;
  readonly fields: Fields | undefined;
  /** An envelope field the entry holds twice (the reply keeps one value only). */
  readonly repeated?: string;
}

const AS_BUFFERS = { typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer } } as const;

/**
 * Consumes a Redis stream through the inbox with a consumer group (created with
 * `XGROUP CREATE … MKSTREAM` if missing).
 *
 * @example
 * const consumer = await consumeRedis({ inbox, handler, url: 'redis://127.0.0.1:6379', stream: 'orders', group: 'inventory', consumerName: hostname() });
 */
export async function consumeRedis<T = unknown, Tx = PoolClient>(
  options: RedisConsumerOptions<T, Tx>,
): Promise<Consumer> {
  const o = resolveRedisConsumerOptions(options);
  const owned: Client[] = [];
  try {
    let main: Client;
    if (o.client) {
      main = o.client;
    } else {
      main = createClient({ ...o.clientOptions, url: o.url! });
      owned.push(main);
    }
    main.on('error', noop);
    const reader = main.duplicate();
    owned.push(reader);
    reader.on('error', noop);
    if (!main.isOpen) await main.connect();
    await reader.connect();
    try {
      await main.sendCommand(['XGROUP', 'CREATE', o.stream, o.group, o.startId, 'MKSTREAM']);
    } catch (error) {
      if (!errorMessage(error).startsWith('BUSYGROUP')) throw error;
    }
    const consumer = new RedisConsumer(main, reader, owned, o);
    consumer.start();
    return consumer;
  } catch (error) {
    for (const c of owned) c.destroy();
    throw error;
  }
}

const noop = (): void => {};

class RedisConsumer<T, Tx> implements Consumer {
  readonly #queue: KeyedQueue;
  readonly #life: ConsumerLifecycle;
  /** Entry ids being handled here: a claim never hands them over twice. */
  readonly #handling = new Map<string, Promise<void>>();
  #loop: Promise<void> | undefined;
  #claimTimer: NodeJS.Timeout | undefined;
  #claiming: Promise<void> | undefined;

  constructor(
    private readonly main: Client,
    private readonly reader: Client,
    private readonly owned: Client[],
    private readonly o: ResolvedRedisConsumerOptions<T, Tx>,
  ) {
    this.#queue = new KeyedQueue(o.concurrency);
    this.#life = new ConsumerLifecycle(o.signal, () => this.#shutdown());
  }

  start(): void {
    this.#loop = this.#run();
    this.#claimTimer = setInterval(() => {
      this.#claiming ??= this.#claim(this.o.claimIdleMs).finally(() => {
        this.#claiming = undefined;
      });
    }, this.o.claimIntervalMs);
    this.#life.started();
  }

  stop(): Promise<void> {
    return this.#life.stop();
  }

  async #shutdown(): Promise<void> {
    clearInterval(this.#claimTimer);
    // Interrupts a blocked XREADGROUP; the reader is ours alone.
    this.reader.destroy();
    await this.#loop;
    await this.#claiming;
    await this.#life.settled();
    for (const c of this.owned) {
      if (c === this.reader) continue;
      await c.close().catch(() => c.destroy());
    }
    this.main.off('error', noop);
  }

  async #run(): Promise<void> {
    while (!this.#life.stopping) {
      try {
        while (this.#life.inFlight >= this.o.concurrency * 2 && !this.#life.stopping)
          await this.#life.oneSettled();
        if (this.#life.stopping) break;
        const reply = await this.reader.sendCommand(
          [
            'XREADGROUP',
            'GROUP',
            this.o.group,
            this.o.consumerName,
            'COUNT',
            String(this.o.concurrency),
            'BLOCK',
            String(this.o.blockMs),
            'STREAMS',
            this.o.stream,
            '>',
          ],
          AS_BUFFERS,
        );
        for (const entry of readReply(reply)) this.#dispatch(entry);
      } catch (error) {
        if (this.#life.stopping) break;
        this.o.logger.error({ err: error, stream: this.o.stream }, 'XREADGROUP failed; retrying');
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }

  /** XAUTOCLAIM pending entries idle longer than `idle` ms to this consumer, and handles them. */
  async #claim(idle: number): Promise<void> {
    try {
      let cursor = '0-0';
      for (let round = 0; round < 10 && !this.#life.stopping; round++) {
        const reply = (await this.main.sendCommand(
          [
            'XAUTOCLAIM',
            this.o.stream,
            this.o.group,
            this.o.consumerName,
            String(idle),
            cursor,
            'COUNT',
            String(this.o.concurrency * 2),
          ] as RedisArgument[],
          AS_BUFFERS,
        )) as [Buffer, unknown, unknown?];
        for (const entry of readEntries(reply[1])) {
          if (this.#life.stopping) break;
          // Deleted (trimmed) while pending: nothing to handle, nothing to keep.
          if (entry.fields === undefined) await this.#ack(entry.id);
          else this.#dispatch(entry);
        }
        cursor = reply[0].toString();
        if (cursor === '0-0') break;
      }
    } catch (error) {
      if (!this.#life.stopping)
        this.o.logger.error({ err: error, stream: this.o.stream }, 'XAUTOCLAIM failed');
    }
  }

  #dispatch(entry: Entry): void {
    if (this.#handling.has(entry.id) || entry.fields === undefined) return;
    const task = this.#deliver(entry.id, entry.fields, entry.repeated).finally(() =>
      this.#handling.delete(entry.id),
    );
    this.#handling.set(entry.id, task);
    this.#life.track(task);
  }

  async #deliver(id: string, fields: Fields, repeated: string | undefined): Promise<void> {
    let message: InboxMessage;
    try {
      if (repeated !== undefined) throw repeatedHeader(repeated, 'entry');
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(fields))
        if (name !== PAYLOAD_FIELD) headers[name] = value.toString('utf8');
      message = noteDelivery(fromEnvelope(headers, fields[PAYLOAD_FIELD] ?? Buffer.alloc(0)), {
        system: 'redis',
        destination: this.o.stream,
      });
    } catch (error) {
      this.o.logger.error(
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
      this.o.logger.error({ err: error, eventId: message.eventId }, 'inbox failed; entry stays pending');
    }
  }

  async #ack(id: string): Promise<void> {
    try {
      await this.main.sendCommand(['XACK', this.o.stream, this.o.group, id]);
    } catch (error) {
      // Left pending: claimed again later and deduplicated by the inbox.
      this.o.logger.warn({ err: error, entryId: id }, 'XACK failed');
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
    let repeated: string | undefined;
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const name = flat[i]!.toString();
      if (repeated === undefined && Object.hasOwn(fields, name) && isEnvelopeName(name)) repeated = name;
      fields[name] = flat[i + 1]!;
    }
    return repeated === undefined ? { id: id.toString(), fields } : { id: id.toString(), fields, repeated };
  });
}
