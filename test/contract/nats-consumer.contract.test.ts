import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeNats } from '../../src/consumers/nats.js';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { ensureStream } from '../../src/publishers/nats/index.js';
import { consumerContract, previousEnvelopeHeaders } from '../../src/testing/index.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';

const streamOf = (ns: string) => `TXO_CC_${ns}`;
let nc: NatsConnection;

beforeAll(async () => {
  nc = await connect({ servers: NATS_URL });
});
afterAll(async () => {
  await nc?.close();
});

consumerContract(
  { describe, it, expect, beforeAll, afterAll },
  {
    name: 'nats',
    databaseUrl: DATABASE_URL,
    prepare: (ns) => ensureStream(nc, { name: streamOf(ns), subjects: [`${ns}.>`] }).then(() => undefined),
    async publish(ns, messages, options) {
      // Plain JetStream publishes without a Nats-Msg-Id: the contract wants repeated ids stored
      // again. One subject: an aggregate id need not be a subject token. `previous`: the ce-*
      // headers of tx-outbox 0.1, values as they are (it set them as here, through the client).
      const js = jetstream(nc);
      for (const m of messages) {
        const h = natsHeaders();
        const envelope = options?.previous
          ? previousEnvelopeHeaders(m, 'contract')
          : envelopeHeaders(m, 'contract', 'nats');
        for (const [k, v] of Object.entries(envelope)) h.set(k, v);
        await js.publish(`${ns}.events`, m.payload, { headers: h });
      }
    },
    async publishForeign(ns) {
      const h = natsHeaders();
      h.set('x-foo', 'bar');
      await jetstream(nc).publish(`${ns}.raw`, new TextEncoder().encode('{}'), { headers: h });
    },
    envelope: {
      binding: 'nats',
      async publish(ns, m, headers) {
        const h = natsHeaders();
        for (const [k, v] of headers) h.append(k, v);
        await jetstream(nc).publish(`${ns}.events`, m.payload, { headers: h });
      },
    },
    consume: (ns, setup) =>
      consumeNats({
        inbox: setup.inbox,
        handler: setup.handler,
        url: NATS_URL,
        stream: streamOf(ns),
        durable: 'contract',
        concurrency: setup.concurrency,
        deferMs: setup.deferMs,
        logger: setup.logger,
        ...(setup.signal ? { signal: setup.signal } : {}),
      }),
    async settled(ns) {
      const info = await (await jetstreamManager(nc)).consumers
        .info(streamOf(ns), 'contract')
        .catch(() => null);
      return info !== null && info.num_ack_pending === 0 && info.num_pending === 0;
    },
    async cleanup(ns) {
      await (await jetstreamManager(nc)).streams.delete(streamOf(ns)).catch(() => undefined);
    },
  },
);
