/**
 * Issue 14, test 3: PostgreSQL restarted under a streaming CDC relay, on a private cluster
 * (test/helpers/private-postgres.ts: wal_level=logical, wal_sender_timeout 5 s): once `fast`
 * (every session ended, checkpoint) and once `immediate` (a crash, recovery at start). The relay
 * (a child process) must reconnect on its own and finish the backlog: nothing lost, first
 * deliveries in per-aggregate order, the process never exits.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Committed,
  cdcEvents,
  eventRows,
  firstDeliveryOrderViolations,
  missingIds,
  produce,
  waitUntil,
} from '../helpers/cdc.js';
import { waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { readStream, watchSubjects } from '../helpers/nats-stream.js';
import { PrivatePostgres } from '../helpers/private-postgres.js';
import { CdcFixture, natsNames, streamCount } from './cdc-scenarios.js';

let server: PrivatePostgres;
let fixture: CdcFixture;

beforeAll(async () => {
  server = await PrivatePostgres.start();
  fixture = await CdcFixture.create('cdc_failures_pgrestart', server.url());
}, 120_000);
afterAll(async () => {
  await fixture?.close().catch(() => undefined);
  await server?.destroy();
}, 60_000);

describe('cdc failure: PostgreSQL restarted while the relay streams', () => {
  it('reconnects after a fast and an immediate restart and delivers everything', async () => {
    const { stream, prefix, nats } = natsNames(fixture);
    const watch = await watchSubjects(NATS_URL, `${prefix}.>`);
    fixture.cleanups.push(() => watch.close());
    const relay = fixture.relay({
      broker: 'nats',
      nats,
      relayId: 'pgrestart',
      batchSize: 200,
      // The broker stays up: a slow publish must not hide the reconnect.
      silenceTimeoutMs: 4000,
      heartbeatMs: 1000,
    });
    await relay.streaming(40_000);

    const committed: Committed[] = [];
    committed.push(
      ...(await produce(fixture.db.pool, fixture.schema, cdcEvents(prefix, 20_000, 1_000), { perTx: 500 })),
    );
    await waitFor(() => watch.seen.length >= 3_000, { timeoutMs: 30_000, what: '3,000 events published' });

    const fastAt = Date.now();
    await server.restart('fast');
    const afterFast = await relay.waitForStats((s) => s.cdc.reconnects >= 1 && s.cdc.streaming, {
      timeoutMs: 30_000,
      what: 'streaming again after the fast restart',
    });
    const fastBackMs = Date.now() - fastAt;
    committed.push(
      ...(await produce(fixture.db.pool, fixture.schema, cdcEvents(prefix, 5_000, 1_000, 20_000), {
        perTx: 500,
      })),
    );

    // Every event committed so far is in the stream: the relay published after the fast restart
    // (counting publishes from here would miss a relay that kept up with the producer).
    await waitUntil(async () => (await streamCount(stream)) >= 25_000, {
      timeoutMs: 30_000,
      intervalMs: 250,
      what: () => `publishing after the fast restart (relay: ${JSON.stringify(relay.stats()?.cdc)})`,
    });
    const crashAt = Date.now();
    await server.restart('immediate');
    await relay.waitForStats((s) => s.cdc.reconnects > afterFast.cdc.reconnects && s.cdc.streaming, {
      timeoutMs: 30_000,
      what: 'streaming again after the immediate restart',
    });
    const crashBackMs = Date.now() - crashAt;
    committed.push(
      ...(await produce(fixture.db.pool, fixture.schema, cdcEvents(prefix, 5_000, 1_000, 25_000), {
        perTx: 500,
      })),
    );

    const total = 30_000;
    await waitUntil(async () => (await streamCount(stream)) >= total, {
      timeoutMs: 60_000,
      intervalMs: 250,
      what: () =>
        `all ${total} events in the stream (relay: ${JSON.stringify(relay.stats())}, exited ${JSON.stringify(relay.exited)})\n${relay.problems()}`,
    });
    await waitFor(async () => (await eventRows(fixture.db.pool, fixture.schema)) === 0, {
      timeoutMs: 20_000,
      what: 'the events table emptied',
    });
    const stored = await readStream(NATS_URL, stream);
    const s = relay.stats()!;
    console.info(
      `cdc pg restart: streaming again ${fastBackMs} ms after the fast restart began, ${crashBackMs} ms after the immediate one; ${watch.seen.length} publishes for ${total} events; reconnects ${s.cdc.reconnects}`,
    );
    expect(
      missingIds(
        committed,
        stored.map((e) => e.eventId),
      ),
    ).toEqual([]);
    expect(firstDeliveryOrderViolations(stored)).toEqual([]);
    expect(relay.exited, relay.problems()).toBeUndefined();
    expect(s.cdc.reconnects).toBeGreaterThanOrEqual(2);
    expect(s.dead).toBe(0);
  }, 150_000);
});
