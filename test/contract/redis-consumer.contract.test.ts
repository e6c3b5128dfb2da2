import { randomBytes } from 'node:crypto';
import { createClient, type RedisArgument } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeRedis } from '../../src/consumers/redis.js';
import type { OutboxMessage, Publisher } from '../../src/publishers/contract.js';
import { redisPublisher } from '../../src/publishers/redis/index.js';
import { consumerContract, previousEnvelopeHeaders } from '../../src/testing/index.js';
import { DATABASE_URL } from '../helpers/env.js';
import { publishAll } from '../helpers/messages.js';

const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';
const ROOT = `txo-rcc-${randomBytes(4).toString('hex')}`;
const streamOf = (ns: string) => `${ROOT}:${ns}`;
let redis: ReturnType<typeof createClient>;
let publisher: Publisher;

beforeAll(async () => {
  redis = createClient({ url: REDIS_URL });
  await redis.connect();
  // No dedup guard: the contract wants a repeated event id appended again.
  publisher = redisPublisher({
    url: REDIS_URL,
    dedupWindowMs: 0,
    destination: (m) => streamOf(m.topic ?? ''),
  });
});
afterAll(async () => {
  await publisher?.close();
  if (redis) {
    for await (const keys of redis.scanIterator({ MATCH: `${ROOT}*`, COUNT: 1000 }))
      if (keys.length > 0) await redis.del(keys);
    await redis.close();
  }
});

consumerContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'redis',
    databaseUrl: DATABASE_URL,
    publish: (_ns, messages, options) =>
      options?.previous ? publishPrevious(messages) : publishAll(publisher, messages),
    async publishForeign(ns) {
      await redis.xAdd(streamOf(ns), '*', { foo: 'bar', payload: '{}' });
    },
    envelope: {
      binding: 'redis',
      async publish(ns, m, headers) {
        // A stream entry may hold a field name twice.
        const args: RedisArgument[] = ['XADD', streamOf(ns), '*'];
        for (const [name, value] of headers) args.push(name, value);
        args.push('payload', Buffer.from(m.payload));
        await redis.sendCommand(args);
      },
    },
    consume: (ns, setup) =>
      consumeRedis({
        inbox: setup.inbox,
        handler: setup.handler,
        url: REDIS_URL,
        stream: streamOf(ns),
        group: 'contract',
        consumerName: `c${setup.instance}`,
        concurrency: setup.concurrency,
        blockMs: 200,
        claimIdleMs: setup.deferMs,
        logger: setup.logger,
        ...(setup.signal ? { signal: setup.signal } : {}),
      }),
    async settled(ns) {
      const reply = (await redis.sendCommand(['XINFO', 'GROUPS', streamOf(ns)]).catch(() => [])) as unknown[];
      const group = reply
        .map((g) => Object.fromEntries(chunk(g as unknown[])))
        .find((g) => g['name'] === 'contract');
      return group !== undefined && Number(group['pending']) === 0 && Number(group['lag']) === 0;
    },
  },
);

/** Appends `messages` as tx-outbox 0.1's publisher did: its `ce-*` fields, then `payload`. */
async function publishPrevious(messages: readonly OutboxMessage[]): Promise<void> {
  for (const m of messages) {
    const args: RedisArgument[] = ['XADD', streamOf(m.topic ?? ''), '*'];
    const envelope = previousEnvelopeHeaders(m, 'contract');
    for (const field in envelope) if (field !== 'payload') args.push(field, envelope[field]!);
    args.push('payload', Buffer.from(m.payload));
    await redis.sendCommand(args);
  }
}

function chunk(flat: unknown[]): Array<[string, unknown]> {
  const pairs: Array<[string, unknown]> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) pairs.push([String(flat[i]), flat[i + 1]]);
  return pairs;
}
