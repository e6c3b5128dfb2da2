import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisPublisher } from '../../src/publishers/redis/index.js';
import { publisherContract } from '../../src/testing/index.js';
import { CONTRACT_RELAY_EVENTS, DATABASE_URL } from '../helpers/env.js';
import {
  connectRedis,
  deleteKeys,
  entries,
  REDIS_URL,
  type RedisTestClient,
  toReceived,
} from '../helpers/redis.js';
import { expectNoUnhandledRejections } from '../helpers/unhandled.js';

const broker = new URL(REDIS_URL);
// Unique per run: test files run in parallel against one shared Redis. Every key this file
// creates starts with ROOT and is deleted in afterAll.
const ROOT = `txo-redis-contract-${randomBytes(4).toString('hex')}`;
const contractKey = (ns: string, name: string): string => `${ROOT}:${ns}:${name}`;

let redis: RedisTestClient;

expectNoUnhandledRejections();

beforeAll(async () => {
  redis = await connectRedis();
});

afterAll(async () => {
  await deleteKeys(redis, `${ROOT}:*`);
  await redis.close();
});

publisherContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'redis',
    features: { orderedPerKey: true, brokerDedup: true, persistent: false },
    broker: { host: broker.hostname, port: Number(broker.port || 6379) },
    cloudEvents: true,
    create: async (address, ns, options) => {
      // The suite's poison() is synchronous, so the key that makes XADD fail is made here,
      // before any publish of the namespace, where it can be awaited.
      await redis.set(contractKey(ns, 'poison'), 'not a stream');
      return redisPublisher({
        url: `redis://${address.host}:${address.port}`,
        keyPrefix: contractKey(ns, 'guard'),
        timeoutMs: 3000,
        ...(options?.ceSource === undefined ? {} : { ceSource: options.ceSource }),
      });
    },
    topic: (ns) => contractKey(ns, 'events'),
    read: async (ns, expected) => {
      const deadline = Date.now() + 5000;
      let got = await entries(redis, contractKey(ns, 'events'));
      while (got.length < expected && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 25));
        got = await entries(redis, contractKey(ns, 'events'));
      }
      return got.map(toReceived);
    },
    poison: (ns, m) => ({ ...m, topic: contractKey(ns, 'poison') }),
    cleanup: (ns) => deleteKeys(redis, `${ROOT}:${ns}:*`),
  },
  { relay: { databaseUrl: DATABASE_URL, events: CONTRACT_RELAY_EVENTS } },
);
