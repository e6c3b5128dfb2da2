// A relay: createRelay with the broker's publisher, default settings.
import { createRelay } from '../../dist/index.js';
import { cfg, logger, newPool, onStop, reportStats, untilStarted } from './common.mjs';

async function publisher() {
  if (cfg.broker === 'nats') {
    const { natsPublisher } = await import('../../dist/publishers/nats.js');
    return natsPublisher({ servers: cfg.brokerUrl, stream: cfg.stream });
  }
  const { kafkaPublisher } = await import('../../dist/publishers/kafka/index.js');
  return kafkaPublisher({ url: [cfg.brokerUrl] });
}

const pool = newPool(10);
const pub = await publisher();
const relay = createRelay({ pool, publisher: pub, logger, relayId: `${cfg.name}-${process.pid}` });
const print = reportStats(() => {
  const s = relay.stats();
  return {
    published: s.published,
    retried: s.retried,
    dead: s.dead,
    unavailable: s.unavailable,
    batches: s.batches,
    partitions: s.partitions.length,
  };
});
onStop(async () => {
  await relay.stop({ timeout: 10_000 });
  await pub.close();
  await pool.end();
}, print);
await untilStarted('relay', () => relay.start());
logger.info('relaying');
