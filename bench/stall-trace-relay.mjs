// A diagnostic copy of bench/relay-process.mjs, for bench/stall-trace.ts: the polling relay of the
// build at TXO_TRACE_ROOT, with every publish call over 5 ms classified by what the process did
// meanwhile (a GC pause; an event-loop gap with the process off the CPU or busy; or neither: a
// wait for PubAcks), statements over 5 ms, events published more than 900 ms after created_at,
// and the relay's warnings, logged to stderr (`TRACE <ms> …`). It costs CPU of its own (a 1 ms
// ticker): use it to find stalls, never for figures.
import { PerformanceObserver, performance } from 'node:perf_hooks';
import pg from 'pg';
import { benchRelayOptions, serveBenchRelay } from './relay-config.mjs';

const root = process.env.TXO_TRACE_ROOT;
const txo = await import(`${root}/dist/index.js`);
const { natsPublisher } = await import(`${root}/dist/publishers/nats/index.js`);
const cfg = JSON.parse(process.env.TXO_BENCH_RELAY ?? '{}');
const t = () => performance.now().toFixed(1);
const log = (...a) => process.stderr.write(`TRACE ${t()} ${a.join(' ')}\n`);
const gcs = []; // [start, end]
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    gcs.push([e.startTime, e.startTime + e.duration]);
    if (e.duration > (process.env.TRACE_GC_ALL ? 0 : 2)) log('gc', e.detail?.kind, e.duration.toFixed(1));
  }
}).observe({ entryTypes: ['gc'] });
// event-loop stalls: a 1 ms ticker that notices gaps
const gaps = []; // [start, end] of ticker gaps over 3 ms
let last = performance.now();
let lastCpu = process.cpuUsage();
setInterval(() => {
  const n = performance.now();
  const cpu = process.cpuUsage();
  const used = (cpu.user - lastCpu.user + cpu.system - lastCpu.system) / 1000;
  if (n - last > 3) gaps.push([last, n, used]);
  if (n - last > 8) log('loop-gap', (n - last).toFixed(1), 'cpu', used.toFixed(1));
  last = n;
  lastCpu = cpu;
}, 1).unref();
const overlap = (list, a, b) =>
  list.reduce((s, [x, y]) => s + Math.max(0, Math.min(b, y) - Math.max(a, x)), 0);
// CPU the process used in the gaps overlapping [a, b] (pro rata).
const gapCpu = (a, b) =>
  gaps.reduce((s, [x, y, c]) => s + (c * Math.max(0, Math.min(b, y) - Math.max(a, x))) / (y - x), 0);
const kinds = { total: 0, slow: 0, gc: 0, busy: 0, offcpu: 0, wait: 0 };
const pool = new pg.Pool({
  connectionString: cfg.databaseUrl,
  max: 4,
  ...(cfg.applicationName ? { application_name: cfg.applicationName } : {}),
});
const origQuery = pg.Client.prototype.query;
pg.Client.prototype.query = function (...args) {
  const text = typeof args[0] === 'string' ? args[0] : (args[0]?.text ?? '');
  const name = typeof args[0] === 'object' ? args[0]?.name : undefined;
  const s = performance.now();
  const r = origQuery.apply(this, args);
  if (r && typeof r.then === 'function')
    r.then(
      () => {
        const d = performance.now() - s;
        if (d > 5) log('sql', d.toFixed(1), name ?? text.replace(/\s+/g, ' ').slice(0, 50));
      },
      () => undefined,
    );
  return r;
};
const publisher = natsPublisher({ url: cfg.natsUrl, stream: cfg.stream });
const inner = publisher.publish.bind(publisher);
const ages = [];
const calls = [];
publisher.publish = async (batch, signal) => {
  const wall = Date.now();
  for (const m of batch) {
    const age = wall - m.createdAt.getTime();
    ages.push(age);
    if (age > 900) log('OLD', age, m.aggregateType, m.aggregateId, m.sequence, m.id);
  }
  const s = performance.now();
  const r = await inner(batch, signal);
  const e = performance.now();
  const d = e - s;
  calls.push(d);
  kinds.total += 1;
  if (d > 5) {
    kinds.slow += 1;
    // Judged after the ticker had a chance to see the gap that ends now.
    setTimeout(() => {
      const g = overlap(gcs, s, e);
      const gap = overlap(gaps, s, e);
      const cpu = gapCpu(s, e);
      const why = g > d / 3 ? 'gc' : gap > d / 3 ? (cpu > gap / 2 ? 'busy' : 'offcpu') : 'wait';
      kinds[why] += 1;
      log(
        'publish',
        d.toFixed(1),
        batch.length,
        why,
        `gc ${g.toFixed(1)} loopgap ${gap.toFixed(1)} cpu-in-gap ${cpu.toFixed(1)}`,
      );
    }, 5);
  }
  return r;
};
const logger = {
  debug() {},
  info: (o, m) => log('info', m, JSON.stringify(o)),
  warn: (o, m) => log('WARN', m, JSON.stringify(o)),
  error: (o, m) => log('ERROR', m, JSON.stringify(o)),
  child() {
    return this;
  },
};
const relay = txo.createRelay({
  logger,
  pool,
  publisher,
  ...benchRelayOptions(cfg),
});
await serveBenchRelay(relay, publisher, pool, () => {
  log('stats', JSON.stringify(relay.stats().timings));
  const pct = (a, q) => {
    const x = [...a].sort((p, q) => p - q);
    return x[Math.floor((x.length - 1) * q)]?.toFixed(2);
  };
  log(
    'age at publish (created_at -> publish call) p50',
    pct(ages, 0.5),
    'p90',
    pct(ages, 0.9),
    'p99',
    pct(ages, 0.99),
    '; publish call p50',
    pct(calls, 0.5),
    'p99',
    pct(calls, 0.99),
    'calls',
    calls.length,
  );
  log(
    'publish-kinds',
    JSON.stringify(kinds),
    'gc ms total',
    gcs.reduce((t, [a, b]) => t + b - a, 0).toFixed(0),
    'gcs',
    gcs.length,
  );
  process.stdout.write(`${JSON.stringify({ stats: relay.stats(), peakRssMb: 0 })}\n`);
});
