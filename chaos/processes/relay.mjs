// A relay: createRelay (cfg.relay 'poll') or createCdcRelay ('cdc', its replication connection
// on a proxy link of its own: cfg.replicationUrl) with the broker's publisher, default settings.
import { createCdcRelay, createRelay } from '../../dist/index.js';
import { cfg, logger, newPool, onStop, reportStats, untilStarted } from './common.mjs';

async function publisher() {
  if (cfg.broker === 'nats') {
    const { natsPublisher } = await import('../../dist/publishers/nats/index.js');
    return natsPublisher({ url: cfg.brokerUrl, stream: cfg.stream });
  }
  const { kafkaPublisher } = await import('../../dist/publishers/kafka/index.js');
  return kafkaPublisher({ url: [cfg.brokerUrl] });
}

const pool = newPool(10);
const pub = await publisher();
const options = { pool, publisher: pub, logger, relayId: `${cfg.name}-${process.pid}` };
const cdc = cfg.relay === 'cdc';
const relay = cdc
  ? createCdcRelay({ ...options, connection: { connectionString: cfg.replicationUrl } })
  : createRelay(options);
const print = reportStats(() => {
  const s = relay.stats();
  return {
    published: s.published,
    retried: s.retried,
    dead: s.dead,
    unavailable: s.unavailable,
    batches: s.batches,
    partitions: s.partitions.length,
    ...(cdc
      ? {
          streaming: s.cdc.streaming ? 1 : 0,
          reconnects: s.cdc.reconnects,
          handovers: s.cdc.handovers,
          refusedMessages: s.cdc.refusedMessages,
        }
      : {}),
  };
});
onStop(async () => {
  await relay.stop({ timeout: 10_000 });
  await pub.close();
  await pool.end();
}, print);
await untilStarted('relay', () => relay.start());
logger.info({ relay: cfg.relay ?? 'poll' }, 'relaying');
