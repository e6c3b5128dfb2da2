// An inbox consumer: the broker's consumer adapter feeding createInbox (strict ordering,
// default settings); each event's effect is one chaos.effects row written in the inbox
// transaction — the consumer-side truth.
import { createInbox } from '../../dist/index.js';
import { cfg, logger, newPool, onStop, reportStats, untilStarted } from './common.mjs';

const pool = newPool(20);
const inbox = createInbox({ pool, consumer: 'chaos', ordering: 'strict', logger });

async function handler(tx, event) {
  await tx.query(
    'INSERT INTO chaos.effects (event_id, aggregate_id, sequence, consumer) VALUES ($1, $2, $3, $4)',
    [event.eventId, event.aggregateId, event.sequence, cfg.name],
  );
}

async function consume() {
  if (cfg.broker === 'nats') {
    const { consumeNats } = await import('../../dist/consumers/nats.js');
    return consumeNats({
      inbox,
      handler,
      url: cfg.brokerUrl,
      stream: cfg.stream,
      durable: 'chaos',
      logger,
    });
  }
  const { consumeKafka } = await import('../../dist/consumers/kafka/index.js');
  return consumeKafka({
    inbox,
    handler,
    url: [cfg.brokerUrl],
    topic: cfg.topic,
    group: 'chaos',
    logger,
  });
}

let consumer;
const print = reportStats(() => ({ ...inbox.stats() }));
onStop(async () => {
  await consumer?.stop();
  await pool.end();
}, print);
consumer = await untilStarted('consumer', consume);
logger.info('consuming');
