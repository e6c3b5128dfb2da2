/**
 * Issue 14, test 4: the replication connection goes silent. The CDC relay's replication
 * connection (only it: the pool connects directly) runs through a TCP proxy
 * (src/testing/tcp-proxy.ts) that then black-holes its traffic, both ways, socket kept open:
 * no error, no keepalive, nothing. The watchdog must see it (stats().cdc.reconnects rises)
 * within silenceTimeoutMs + slack and stream again on a new connection; nothing is lost.
 *
 * The proxy holds new connections too while it stalls, so the stall ends as soon as the relay
 * has noticed: what is measured is the detection, then the new connection's start.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import {
  cdcEvents,
  eventRows,
  firstDeliveryOrderViolations,
  missingIds,
  produce,
  waitUntil,
} from '../helpers/cdc.js';
import { waitFor } from '../helpers/db.js';
import { DATABASE_URL, NATS_URL } from '../helpers/env.js';
import { readStream, watchSubjects } from '../helpers/nats-stream.js';
import { CdcFixture, natsNames, streamCount } from './cdc-scenarios.js';

const SILENCE_MS = 3000;
const HEARTBEAT_MS = 500;
const SLACK_MS = 2500;

let fixture: CdcFixture;
let proxy: TcpProxy;

beforeAll(async () => {
  fixture = await CdcFixture.create('cdc_failures_silence');
  const url = new URL(DATABASE_URL);
  proxy = await TcpProxy.start({ host: url.hostname, port: Number(url.port || 5432) });
});
afterAll(async () => {
  proxy?.heal();
  await fixture?.close();
  await proxy?.close();
}, 60_000);

describe('cdc failure: a replication connection that goes silent', () => {
  it('is detected within the silence timeout and re-established; nothing is lost', async () => {
    const url = new URL(DATABASE_URL);
    const { stream, prefix, nats } = natsNames(fixture);
    const watch = await watchSubjects(NATS_URL, `${prefix}.>`);
    fixture.cleanups.push(() => watch.close());
    const relay = fixture.relay({
      broker: 'nats',
      nats,
      relayId: 'silence',
      silenceTimeoutMs: SILENCE_MS,
      heartbeatMs: HEARTBEAT_MS,
      statusIntervalMs: 250,
      connection: {
        host: '127.0.0.1',
        port: proxy.port,
        user: decodeURIComponent(url.username || 'postgres'),
        database: url.pathname.slice(1) || 'test',
      },
    });
    await relay.streaming(40_000);
    expect(proxy.connections, 'the replication connection goes through the proxy').toBeGreaterThanOrEqual(1);

    const producing = produce(fixture.db.pool, fixture.schema, cdcEvents(prefix, 12_000, 500), {
      perTx: 200,
      pauseMs: 25,
    });
    await waitFor(() => watch.seen.length >= 1_000, { timeoutMs: 30_000, what: '1,000 events published' });

    const before = relay.stats()!.cdc.reconnects;
    const stalledAt = Date.now();
    proxy.stall({ drop: true });
    let detectedMs: number;
    try {
      await relay.waitForStats((s) => s.cdc.reconnects > before, {
        timeoutMs: SILENCE_MS + SLACK_MS + 10_000,
        what: 'the silence detected (reconnects rises)',
      });
      detectedMs = Date.now() - stalledAt;
    } finally {
      proxy.heal();
    }
    const seenAtHeal = watch.seen.length;
    await relay.waitForStats((s) => s.cdc.streaming, { timeoutMs: 20_000, what: 'streaming again' });
    await waitFor(() => watch.seen.length > seenAtHeal, { timeoutMs: 20_000, what: 'publishing again' });
    const backMs = Date.now() - stalledAt;

    const committed = await producing;
    await waitUntil(async () => (await streamCount(stream)) >= 12_000, {
      timeoutMs: 40_000,
      intervalMs: 250,
      what: () =>
        `all events in the stream (relay: ${JSON.stringify(relay.stats())}, exited ${JSON.stringify(relay.exited)})\n${relay.problems()}`,
    });
    await waitFor(async () => (await eventRows(fixture.db.pool, fixture.schema)) === 0, {
      timeoutMs: 20_000,
      what: 'the events table emptied',
    });
    console.info(
      `cdc silence: detected ${detectedMs} ms after the stall (silenceTimeoutMs ${SILENCE_MS}), publishing again ${backMs} ms after it; proxy accepted ${proxy.accepted} connections; TXO_CDC_SILENT logged: ${relay.logged('TXO_CDC_SILENT')}`,
    );
    expect(detectedMs, 'detected within silenceTimeoutMs + slack').toBeLessThanOrEqual(SILENCE_MS + SLACK_MS);
    expect(backMs, 're-established within silenceTimeoutMs + slack').toBeLessThanOrEqual(
      SILENCE_MS + 2 * SLACK_MS,
    );
    expect(proxy.accepted, 'a new replication connection').toBeGreaterThanOrEqual(2);
    expect(relay.logged('TXO_CDC_SILENT'), 'the watchdog (TXO_CDC_SILENT) ended the stream').toBe(true);
    const stored = await readStream(NATS_URL, stream);
    expect(
      missingIds(
        committed,
        stored.map((e) => e.eventId),
      ),
    ).toEqual([]);
    expect(firstDeliveryOrderViolations(stored)).toEqual([]);
    expect(relay.exited, relay.problems()).toBeUndefined();
  }, 120_000);
});
