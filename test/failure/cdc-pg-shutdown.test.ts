/**
 * Issue 24, item 0: a connected CDC relay must not hold up a PostgreSQL shutdown. A fast
 * shutdown ends a walsender only once its client reports as flushed everything it was sent
 * (walsender.c, WalSndDone: flush == sentPtr); a relay that confirms only the end of its last
 * settled outbox transaction never gets there once the WAL ends in something it is not sent (the
 * application's other tables, a checkpoint), and the server stays "shutting down", refusing
 * every connection, until the relay is stopped. With nothing in flight the relay confirms the
 * WAL end the server sent (keepalives), as pg_recvlogical does; with events it cannot settle (the
 * broker is down) it ends its stream once PostgreSQL refuses connections as shutting down.
 *
 * On a private cluster, `pg_ctl restart -m fast` (a) while the relay streams a backlog, (b) while
 * it is idle after streaming, (c) while its broker is down with events in flight: the restart
 * completes within RESTART_BOUND_MS, the relay (a child process) streams again on its own, and
 * every event committed before and after reaches the broker.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TcpProxy } from '../../src/testing/tcp-proxy.js';
import {
  type Committed,
  cdcEvents,
  countIds,
  missingIds,
  produce,
  slotState,
  type Via,
  waitUntil,
} from '../helpers/cdc.js';
import { waitFor } from '../helpers/db.js';
import { NATS_URL } from '../helpers/env.js';
import { readStream, watchSubjects } from '../helpers/nats-stream.js';
import { PrivatePostgres } from '../helpers/private-postgres.js';
import { CdcFixture, natsNames, streamCount } from './cdc-scenarios.js';

/** A fast restart of an idle private cluster takes about a second; pg_ctl gives up past this. */
const RESTART_BOUND_MS = 10_000;

let server: PrivatePostgres;
/** pg_ctl gave up on a restart: the server is (still) shutting down until the relay is gone. */
let restartFailed = false;
const fixtures: CdcFixture[] = [];

beforeAll(async () => {
  server = await PrivatePostgres.start();
}, 120_000);
afterEach(async () => {
  const done = fixtures.splice(0);
  for (const f of done) for (const c of f.children) await c.kill();
  if (restartFailed) {
    // The shutdown pg_ctl gave up on completes once the relay is gone: wait for it, start again.
    restartFailed = false;
    await server.stop('fast').catch(() => undefined);
    await server.up();
  }
  for (const f of done) await f.close().catch(() => undefined);
}, 90_000);
afterAll(async () => {
  await server?.destroy();
}, 60_000);

/** `pg_ctl restart -m fast`, bounded; resolves to how long it took, rejects past the bound. */
async function timedFastRestart(): Promise<number> {
  const started = Date.now();
  try {
    await server.restart('fast', { waitSeconds: Math.ceil(RESTART_BOUND_MS / 1000) });
  } catch (error) {
    restartFailed = true;
    throw new Error(
      `pg_ctl restart -m fast did not complete within ${RESTART_BOUND_MS} ms: ${(error as Error).message}\n` +
        server.log().split('\n').slice(-15).join('\n'),
    );
  }
  return Date.now() - started;
}

/**
 * When the restart begins: `streaming` a backlog, `idle` after streaming, or `broker down` with
 * events read and not published (the relay cannot confirm them: it ends its stream instead).
 */
type When = 'streaming' | 'idle' | 'broker down';

async function scenario(name: string, via: Via, when: When): Promise<void> {
  const fixture = await CdcFixture.create(name, server.url());
  fixtures.push(fixture);
  await fixture.db.pool.query(`CREATE TABLE "${fixture.schema}".business (id serial PRIMARY KEY, note text)`);
  const { stream, prefix, nats } = natsNames(fixture);
  const watch = await watchSubjects(NATS_URL, `${prefix}.>`);
  fixture.cleanups.push(() => watch.close());
  // The relay reaches NATS through a proxy the `broker down` case cuts.
  const natsUrl = new URL(NATS_URL);
  const link = await TcpProxy.start({ host: natsUrl.hostname, port: Number(natsUrl.port || 4222) });
  fixture.cleanups.push(() => link.close());
  const relay = fixture.relay({
    broker: 'nats',
    nats: { ...nats!, servers: `nats://127.0.0.1:${link.port}` },
    relayId: name,
    batchSize: 200,
    silenceTimeoutMs: 4000,
    // Idle: the default lease, renewed every 5 s; the keepalive, not a refused renewal, must end it.
    ...(when === 'idle' ? { leaseMs: 15_000 } : {}),
  });
  await relay.streaming(40_000);

  const committed: Committed[] = [];
  const first = when === 'streaming' ? 10_000 : 2_000;
  committed.push(
    ...(await produce(fixture.db.pool, fixture.schema, cdcEvents(prefix, first, 500), { via, perTx: 500 })),
  );
  if (when === 'streaming') {
    await waitFor(() => watch.seen.length >= 2_000, { timeoutMs: 30_000, what: '2,000 events published' });
  } else {
    await waitFor(async () => (await streamCount(stream)) >= first, {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: 'the first events delivered',
    });
    // Idle: the slot confirmed, heartbeats only, for a few status intervals.
    await new Promise((r) => setTimeout(r, 1500));
  }
  let held = 0;
  if (when === 'broker down') {
    await link.cut();
    const unavailable = relay.stats()!.unavailable;
    held = 300;
    committed.push(
      ...(await produce(fixture.db.pool, fixture.schema, cdcEvents(prefix, held, 100, first), { via })),
    );
    await relay.waitForStats((s) => s.unavailable > unavailable, {
      timeoutMs: 30_000,
      what: 'publishes refused with the broker down',
    });
  }
  // The application's own write, in no publication: the server sends the relay nothing of it, yet
  // the WAL it was sent now ends past the last change it settled.
  await fixture.db.pool.query(`INSERT INTO "${fixture.schema}".business (note) VALUES ('no event')`);
  const publishedAtRestart = watch.seen.length;
  const before = relay.stats()!;

  const restartMs = await timedFastRestart();
  if (when === 'broker down') await link.restore();

  await relay.waitForStats((s) => s.cdc.reconnects > before.cdc.reconnects && s.cdc.streaming, {
    timeoutMs: 30_000,
    what: 'streaming again after the restart',
  });
  committed.push(
    ...(await produce(fixture.db.pool, fixture.schema, cdcEvents(prefix, 1_000, 500, first + held), {
      via,
      perTx: 250,
    })),
  );
  const total = countIds(committed);
  await waitUntil(async () => (await streamCount(stream)) >= total, {
    timeoutMs: 60_000,
    intervalMs: 250,
    what: () =>
      `all ${total} events in the stream (relay: ${JSON.stringify(relay.stats())}, exited ${JSON.stringify(relay.exited)})\n${relay.problems()}`,
  });
  const stored = await readStream(NATS_URL, stream);
  const slot = await slotState(fixture.db.pool, fixture.slot);
  console.info(
    `cdc pg shutdown ${via}/${when}: pg_ctl restart -m fast took ${restartMs} ms (bound ${RESTART_BOUND_MS} ms), ` +
      `${publishedAtRestart} of ${first} published when it began; ${watch.seen.length} publishes for ${total} events; ` +
      `reconnects ${relay.stats()!.cdc.reconnects}; slot active ${slot.active}`,
  );
  expect(restartMs).toBeLessThan(RESTART_BOUND_MS);
  if (when === 'idle')
    expect(relay.logged('TXO_CDC_SERVER_DOWN'), 'the server ended the stream, not the relay').toBe(false);
  if (when === 'broker down')
    expect(relay.logged('TXO_CDC_SERVER_DOWN'), 'the relay ended its stream for the shutdown').toBe(true);
  if (when === 'streaming') expect(publishedAtRestart, 'the restart began mid-stream').toBeLessThan(first);
  expect(
    missingIds(
      committed,
      stored.map((e) => e.eventId),
    ),
  ).toEqual([]);
  expect(relay.exited, relay.problems()).toBeUndefined();
  expect(relay.stats()!.dead).toBe(0);
}

describe('cdc failure: PostgreSQL shut down (fast) under a connected relay', () => {
  it('a restart mid-stream (WAL mode) completes promptly and nothing is lost', async () => {
    await scenario('cdc_shutdown_wal_streaming', 'wal', 'streaming');
  }, 120_000);

  it('a restart while the relay is idle after streaming completes promptly', async () => {
    await scenario('cdc_shutdown_idle', 'table', 'idle');
  }, 120_000);

  it('a restart while the broker is down, events in flight, completes promptly and loses none', async () => {
    await scenario('cdc_shutdown_broker_down', 'wal', 'broker down');
  }, 120_000);
});
