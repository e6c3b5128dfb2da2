/**
 * Issue 14, test 1 in table mode (today's INSERT): 20,000 events over 1,000 aggregates (TXO_CDC_STREAM_EVENTS=100000: the first size) streamed by a
 * CDC relay (a child process on the built package) to NATS JetStream and to Kafka: every event
 * delivered, first deliveries in per-aggregate order. The scenario: cdc-scenarios.ts.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { kafkaAvailable } from '../helpers/kafka.js';
import { CdcFixture, streamsEverything } from './cdc-scenarios.js';

const kafkaUp = await kafkaAvailable('cdc-stream.test.ts: the Kafka case');

describe('cdc failure: 20,000 events streamed (table mode)', () => {
  let nats: CdcFixture;
  let kafka: CdcFixture;
  beforeAll(async () => {
    nats = await CdcFixture.create('cdc_failures_stream_n');
    kafka = await CdcFixture.create('cdc_failures_stream_k');
  });
  afterAll(async () => {
    await nats?.close();
    await kafka?.close();
  }, 60_000);

  it('through NATS JetStream: every event delivered, per-aggregate order held', async () => {
    await streamsEverything(nats, 'table', 'nats');
  }, 150_000);

  it.skipIf(!kafkaUp)(
    'through Kafka: every event delivered, per-aggregate order held',
    async () => {
      await streamsEverything(kafka, 'table', 'kafka');
    },
    150_000,
  );
});
