/**
 * The chaos harness: producers, relays and inbox consumers as separate processes on a private
 * PostgreSQL and a private broker, every connection through a fault proxy, faults drawn from a
 * seeded schedule, then a bounded drain and the invariants against the producers' ground truth.
 *
 *   npm run chaos -- --profile short|long --broker nats|kafka [--seed N]
 *                    [--relay poll|cdc] [--producers table|wal|mixed]
 *
 * --relay cdc runs createCdcRelay in the relay processes (one streams, the others stand by), its
 * replication connection on a proxy link of its own; --producers says how the producers enqueue
 * (mixed: table mode and WAL mode in alternate producer processes).
 *
 * Writes chaos/results/<profile>-<broker>-<time>.{md,json} (and a -logs/ folder); exits 1 when
 * an invariant is violated. Everything it starts is stopped and removed, on failure and SIGINT too.
 */
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { ensureCdcSlot, migrate } from '../dist/index.js';
import { TcpProxy } from '../dist/testing/tcp-proxy.js';
import { freePort } from '../test/helpers/processes.js';
import { BROKER_KINDS, type BrokerKind, type ChaosBroker, STREAM, startBroker, TOPIC } from './brokers.js';
import { PRODUCER_MODES, type ProducerMode, producerVia } from './cdc.js';
import { type CdcTarget, type FaultRecord, Injector, runsAlongside } from './faults.js';
import { latencies, recoveryTimes } from './metrics.js';
import { CHAOS_CDC_POSTGRES_SETTINGS, CHAOS_POSTGRES_SETTINGS, PrivatePostgres } from './postgres.js';
import { seededRandom } from './prng.js';
import { PROFILES, type Profile } from './profiles.js';
import { markdown, type RunResult, resultLine } from './report.js';
import { describeFault, faultSchedule, type RelayKind } from './schedule.js';
import { type ComponentSpec, Supervisor } from './supervisor.js';
import { backlog, checkTruth, committedEvents, latencyRows, TRUTH_SQL } from './truth.js';

const SCHEMA = 'outbox';
const PRODUCER_CONCURRENCY = 4;

const { values: args } = parseArgs({
  options: {
    profile: { type: 'string', default: 'short' },
    broker: { type: 'string', default: 'nats' },
    seed: { type: 'string' },
    relay: { type: 'string', default: 'poll' },
    producers: { type: 'string', default: 'mixed' },
  },
});

interface RunOptions {
  profile: Profile;
  broker: BrokerKind;
  seed: number;
  relay: RelayKind;
  /** How producers enqueue; the polling relay's are always in table mode. */
  producers: ProducerMode;
}

function options(): RunOptions {
  const profile = PROFILES[args.profile as Profile['name']];
  if (!profile) throw new Error(`--profile is "${args.profile}": use ${Object.keys(PROFILES).join(' or ')}`);
  const broker = args.broker as BrokerKind;
  if (!BROKER_KINDS.includes(broker))
    throw new Error(`--broker is "${args.broker}": use ${BROKER_KINDS.join(' or ')}`);
  const seed = args.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(args.seed);
  if (!Number.isInteger(seed) || seed < 0)
    throw new Error(`--seed is "${args.seed}": use a non-negative integer`);
  const relay = args.relay as RelayKind;
  if (relay !== 'poll' && relay !== 'cdc') throw new Error(`--relay is "${args.relay}": use poll or cdc`);
  const producers = args.producers as ProducerMode;
  if (!PRODUCER_MODES.includes(producers))
    throw new Error(`--producers is "${args.producers}": use ${PRODUCER_MODES.join(', ')}`);
  if (relay === 'poll' && producers === 'wal')
    throw new Error('--producers wal needs --relay cdc: only the CDC relay reads WAL-mode events');
  return { profile, broker, seed, relay, producers: relay === 'poll' ? 'table' : producers };
}

const log = (line: string): void => console.log(`[chaos ${new Date().toISOString().slice(11, 19)}] ${line}`);

/** Cleanup steps, run in reverse order at the end, on failure and on SIGINT/SIGTERM. */
const releases: (() => Promise<unknown>)[] = [];
async function releaseAll(): Promise<void> {
  while (releases.length > 0) await releases.pop()!().catch((e: unknown) => log(`cleanup: ${String(e)}`));
}

const abort = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    log(`${signal}: stopping and cleaning up`);
    abort.abort(new Error(`interrupted by ${signal}`));
  });
}

function componentNames(profile: Profile): { role: ComponentSpec['role']; name: string }[] {
  const list = (role: ComponentSpec['role'], count: number) =>
    Array.from({ length: count }, (_, i) => ({ role, name: `${role}-${i + 1}` }));
  return [
    ...list('producer', profile.producers),
    ...list('relay', profile.relays),
    ...list('consumer', profile.consumers),
  ];
}

/**
 * Proxy links: every component to PostgreSQL; relays and consumers to the broker (Kafka: one
 * shared link); a CDC relay's replication connection to PostgreSQL (`relay-N>repl`).
 */
function linkNames(
  broker: BrokerKind,
  relay: RelayKind,
  components: readonly { role: ComponentSpec['role']; name: string }[],
): string[] {
  const brokerLinks =
    broker === 'kafka'
      ? ['all>kafka']
      : components.filter((c) => c.role !== 'producer').map((c) => `${c.name}>nats`);
  const replicationLinks =
    relay === 'cdc' ? components.filter((c) => c.role === 'relay').map((c) => `${c.name}>repl`) : [];
  return [...components.map((c) => `${c.name}>pg`), ...brokerLinks, ...replicationLinks];
}

/** A fault proxy on 127.0.0.1 (on `port`, default a free one) in front of a local server. */
function proxyTo(targetPort: number, port = 0): Promise<TcpProxy> {
  return TcpProxy.start({ host: '127.0.0.1', port: targetPort }, port);
}

async function main(): Promise<number> {
  const { profile, broker: brokerKind, seed, relay: relayKind, producers: producerMode } = options();
  const random = seededRandom(seed);
  const components = componentNames(profile);
  const links = linkNames(brokerKind, relayKind, components);
  const schedule = faultSchedule(
    random,
    profile,
    components.map((c) => c.name),
    links,
    relayKind,
  );
  const startedAt = new Date();
  const kindLabel = relayKind === 'cdc' ? `cdc-${producerMode}-` : '';
  const label = `${profile.name}-${kindLabel}${brokerKind}-${startedAt.toISOString().replace(/[:.]/g, '-').slice(0, 19)}`;
  const resultsDir = join(import.meta.dirname, 'results');
  const logDir = join(resultsDir, `${label}-logs`);
  mkdirSync(logDir, { recursive: true });

  log(
    `profile ${profile.name}, broker ${brokerKind}, seed ${seed}, relay ${relayKind}` +
      (relayKind === 'cdc' ? `, producers ${producerMode}` : ''),
  );
  log(`schedule (${schedule.length} faults, t = seconds after the fault phase starts):`);
  for (const f of schedule) console.log(`  ${describeFault(f)}`);

  // Servers and proxies.
  const postgres = await PrivatePostgres.start({
    base: relayKind === 'cdc' ? CHAOS_CDC_POSTGRES_SETTINGS : CHAOS_POSTGRES_SETTINGS,
  });
  releases.push(async () => {
    copyFileSync(postgres.logFile, join(logDir, 'postgres.log'));
    await postgres.destroy();
  });
  log(`private PostgreSQL on 127.0.0.1:${postgres.port}`);
  const db = new pg.Pool({ connectionString: postgres.url(), max: 4 });
  db.on('error', () => undefined);
  releases.push(() => db.end());
  await migrate(db, { schema: SCHEMA });
  await db.query(TRUTH_SQL);
  // The slot before anything writes: WAL-mode producers refuse to enqueue without one.
  const cdc: CdcTarget | undefined =
    relayKind === 'cdc' ? { db, slot: (await ensureCdcSlot(db, { schema: SCHEMA })).slot } : undefined;
  if (cdc) log(`replication slot ${cdc.slot}`);

  const proxies = new Map<string, TcpProxy>();
  releases.push(async () => {
    for (const p of proxies.values()) await p.close();
  });
  const kafkaProxyPort = brokerKind === 'kafka' ? await freePort() : 0;
  const broker: ChaosBroker = await startBroker(brokerKind, kafkaProxyPort);
  releases.push(() => broker.destroy());
  log(`private ${brokerKind} on 127.0.0.1:${broker.port}`);
  if (brokerKind === 'kafka') proxies.set('all>kafka', await proxyTo(broker.port, kafkaProxyPort));
  await broker.setup();
  for (const c of components) {
    proxies.set(`${c.name}>pg`, await proxyTo(postgres.port));
    if (brokerKind === 'nats') proxies.set(`${c.name}>nats`, await proxyTo(broker.port));
    if (relayKind === 'cdc' && c.role === 'relay')
      proxies.set(`${c.name}>repl`, await proxyTo(postgres.port));
  }

  // Components.
  const supervisor = new Supervisor(logDir);
  releases.push(() => supervisor.closeAll());
  let producerIndex = 0;
  for (const c of components) {
    const pgPort = proxies.get(`${c.name}>pg`)!.port;
    const replicationPort = proxies.get(`${c.name}>repl`)?.port;
    const brokerPort = proxies.get(brokerKind === 'kafka' ? 'all>kafka' : `${c.name}>nats`)?.port ?? 0;
    supervisor.add({
      name: c.name,
      role: c.role,
      script: `${c.role}.mjs`,
      config: {
        databaseUrl: `postgres://postgres@127.0.0.1:${pgPort}/postgres`,
        broker: brokerKind,
        brokerUrl: brokerKind === 'nats' ? `nats://127.0.0.1:${brokerPort}` : `127.0.0.1:${brokerPort}`,
        stream: STREAM,
        topic: TOPIC,
        eventsPerSecond: profile.eventsPerSecond / profile.producers,
        concurrency: PRODUCER_CONCURRENCY,
        aggregates: profile.aggregates,
        rollbackShare: profile.rollbackShare,
        maxEventsPerTransaction: profile.maxEventsPerTransaction,
        relay: relayKind,
        ...(replicationPort
          ? { replicationUrl: `postgres://postgres@127.0.0.1:${replicationPort}/postgres` }
          : {}),
        ...(c.role === 'producer' ? { via: producerVia(producerMode, producerIndex++) } : {}),
      },
    });
  }
  supervisor.startAll();
  const producingFrom = Date.now();
  const progress = setInterval(() => {
    void backlog(db, SCHEMA)
      .then(async (b) => {
        const committed = await committedEvents(db);
        log(`committed ${committed}, not yet applied ${b.unapplied}, in the outbox ${b.outbox}`);
      })
      .catch((e: unknown) => log(`progress: ${String(e)}`));
  }, 15_000);
  releases.push(async () => clearInterval(progress));

  // Faults.
  const signal = abort.signal;
  await sleep(profile.warmupSeconds * 1000, undefined, { signal });
  const injector = new Injector(postgres, broker, proxies, supervisor, cdc, signal);
  let phaseStart = Date.now();
  const applying: Promise<FaultRecord>[] = [];
  const said = (record: FaultRecord): FaultRecord => {
    const resolved = record.target === schedule[record.index]?.target ? '' : ` → ${record.target}`;
    const extra = [
      record.takeoverMs !== undefined
        ? `a standby streamed after ${(record.takeoverMs / 1000).toFixed(1)} s`
        : '',
      record.quiet
        ? `slot confirmed +${record.quiet.advancedBytes} bytes in ${record.quiet.advances} steps, ` +
          `${record.quiet.lagBytesAtEnd} bytes unconfirmed at the end (settled in ${record.quiet.settleS} s)`
        : '',
    ].filter(Boolean);
    log(
      `${describeFault(schedule[record.index] ?? record)}${resolved}${extra.length > 0 ? ` (${extra.join(', ')})` : ''}` +
        `${record.applied ? (record.error ? ` PROBLEM: ${record.error}` : '') : ` (not applied${record.error ? `: ${record.error}` : ''})`}`,
    );
    return record;
  };
  for (const fault of schedule) {
    const wait = phaseStart + fault.atS * 1000 - Date.now();
    if (wait > 0) await sleep(wait, undefined, { signal });
    signal.throwIfAborted();
    const applied = injector.apply(fault).then(said);
    applying.push(applied);
    if (runsAlongside(fault)) continue;
    const record = await applied;
    // A quiet period holds the schedule: what came after it starts that much later.
    if (record.kind === 'quiet') phaseStart += record.endedMs - record.startedMs;
  }
  const records = await Promise.all(applying);
  const lastEnd = Math.max(...records.map((r) => r.endedMs));
  await sleep(Math.max(0, lastEnd - Date.now()), undefined, { signal });

  // Producers go on until the event target, within their time bound.
  const producingUntil = producingFrom + profile.maxProducingSeconds * 1000;
  while (Date.now() < producingUntil && (await committedEvents(db)) < profile.events) {
    await sleep(2000, undefined, { signal });
  }
  await supervisor.retire('producer', 10_000);
  const producingSeconds = (Date.now() - producingFrom) / 1000;
  injector.healAll();
  log(
    `producers stopped after ${producingSeconds.toFixed(0)} s; draining (at most ${profile.drainTimeoutSeconds} s)`,
  );

  // Drain: bounded wait until everything committed was applied and the outbox is empty.
  const drainFrom = Date.now();
  let complete = false;
  while (Date.now() - drainFrom < profile.drainTimeoutSeconds * 1000) {
    const b = await backlog(db, SCHEMA).catch(() => undefined);
    if (b && b.unapplied === 0 && b.outbox === 0) {
      complete = true;
      break;
    }
    await sleep(1000, undefined, { signal });
  }
  const drainSeconds = (Date.now() - drainFrom) / 1000;
  log(`drain ${complete ? 'complete' : 'NOT complete'} after ${drainSeconds.toFixed(0)} s`);
  await supervisor.retire('relay', 15_000);
  await supervisor.retire('consumer', 15_000);

  // Verdict.
  const truth = await checkTruth(db, SCHEMA);
  const rows = await latencyRows(db);
  const recovery = recoveryTimes(
    rows,
    records.map((r) => r.endedMs),
  );
  // A fault acts from its start until its recovery ended (a kill acts until the work is taken over).
  const windows = records.map((r, i) => ({ startMs: r.startedMs, endMs: r.endedMs + (recovery[i] ?? 0) }));
  const stored = await broker.storedMessages();
  const sumOf = (role: ComponentSpec['role'], key: string): number =>
    supervisor.byRole(role).reduce((sum, c) => sum + (c.stats()[key] ?? 0), 0);
  const relayStats: Record<string, number> = {};
  const relayKeys = ['published', 'retried', 'dead', 'unavailable', 'batches'];
  if (relayKind === 'cdc') relayKeys.push('reconnects', 'handovers', 'refusedMessages');
  for (const key of relayKeys) relayStats[key] = sumOf('relay', key);
  const invariants = [...truth.invariants];
  if (relayKind === 'cdc') {
    const quiets = records.filter((r) => r.kind === 'quiet' && r.applied);
    const failed = quiets.filter((r) => r.quiet?.ok !== true);
    invariants.push({
      name: `quiet periods in which the heartbeat did not keep the slot advancing and bounded (of ${quiets.length})`,
      value: failed.length,
      ok: failed.length === 0,
      examples: failed.map((r) => `#${r.index}: ${r.error ?? 'no check'}`),
    });
  }
  const result: RunResult = {
    profile,
    broker: brokerKind,
    relay: relayKind,
    producers: producerMode,
    seed,
    startedAt: startedAt.toISOString(),
    wallSeconds: Math.round((Date.now() - startedAt.getTime()) / 1000),
    producingSeconds: Math.round(producingSeconds),
    drain: { seconds: Math.round(drainSeconds), complete },
    faults: records.map((r, i) => ({ ...r, recoveryMs: recovery[i] ?? 0 })),
    events: {
      committed: truth.committedEvents,
      rolledBack: sumOf('producer', 'rolledBackEvents'),
      failedTransactions: sumOf('producer', 'failedTx'),
      effects: truth.effects,
    },
    duplicates: {
      wire: stored - truth.committedEvents,
      storedMessages: stored,
      consumer: sumOf('consumer', 'duplicate'),
      deliveries: ['processed', 'duplicate', 'stale', 'deferred', 'quarantined'].reduce(
        (sum, k) => sum + sumOf('consumer', k),
        0,
      ),
      deferred: sumOf('consumer', 'deferred'),
    },
    latency: latencies(rows, windows),
    starts: Object.fromEntries(supervisor.components.map((c) => [c.name, c.starts])),
    relayStats,
    unexpectedExits: supervisor.unexpectedExits,
    invariants,
    pass: complete && invariants.every((i) => i.ok) && supervisor.unexpectedExits.length === 0,
  };
  writeFileSync(join(resultsDir, `${label}.json`), `${JSON.stringify(result, null, 2)}\n`);
  writeFileSync(join(resultsDir, `${label}.md`), markdown(result));
  for (const i of invariants) log(`${i.ok ? 'ok      ' : 'VIOLATED'} ${i.name}: ${i.value}`);
  log(
    `${supervisor.unexpectedExits.length === 0 ? 'ok      ' : 'VIOLATED'} components that exited by themselves: ${supervisor.unexpectedExits.length}`,
  );
  log(`report: chaos/results/${label}.md (logs in chaos/results/${label}-logs/)`);
  console.log(resultLine(result));
  return result.pass ? 0 : 1;
}

let code = 1;
try {
  code = await main();
} catch (error) {
  log(`the run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
} finally {
  await releaseAll();
}
process.exit(code);
