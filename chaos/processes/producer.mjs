// A producer: business rows (chaos.orders) and their events in one transaction each, a share
// rolled back on purpose. It records nothing outside its transactions: what committed is the
// ground truth. Paced at cfg.eventsPerSecond; cfg.concurrency transactions at once.
// cfg.via 'wal': events enqueued in WAL mode (`enqueue(…, { via: 'wal' })`, CDC relay only).
// A line 'pause' on stdin stops starting transactions (those in flight finish), 'resume' goes on.
import { enqueue } from '../../dist/index.js';
import { cfg, logger, newPool, onStop, reportStats, sleep } from './common.mjs';

const pool = newPool(cfg.concurrency + 1);
const counts = { committedTx: 0, committedEvents: 0, rolledBackEvents: 0, failedTx: 0 };
let stopping = false;
let paused = false;
let nextAt = Date.now();
const options = cfg.via === 'wal' ? { via: 'wal' } : {};

process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => {
  for (const line of String(chunk).split('\n')) {
    if (line.trim() === 'pause') paused = true;
    if (line.trim() === 'resume') {
      paused = false;
      nextAt = Date.now();
    }
  }
});

/** Waits for the pace's next slot for `n` events; never bursts to catch up after a stall. */
async function pace(n) {
  const now = Date.now();
  if (nextAt < now - 1000) nextAt = now;
  const at = nextAt;
  nextAt += (n * 1000) / cfg.eventsPerSecond;
  if (at > now) await sleep(at - now);
}

function aggregatesOfOne() {
  const n = 1 + Math.floor(Math.random() * cfg.maxEventsPerTransaction);
  const ids = new Set();
  while (ids.size < n) ids.add(`agg-${Math.floor(Math.random() * cfg.aggregates)}`);
  // Sorted: two transactions lock their aggregates' sequence rows in one order (no deadlock).
  return [...ids].sort();
}

async function transaction() {
  const aggregates = aggregatesOfOne();
  await pace(aggregates.length);
  const rollback = Math.random() < cfg.rollbackShare;
  const client = await pool.connect();
  // The app's own checked-out client: a connection that dies under it rejects the query in
  // flight; its 'error' event must not be left unhandled (node-postgres would crash the process).
  const onError = (error) => logger.debug({ err: error.message }, 'connection lost in a transaction');
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const results = await enqueue(
      client,
      aggregates.map((aggregateId) => ({
        aggregateType: 'order',
        aggregateId,
        type: 'placed',
        payload: { aggregateId, producer: cfg.name, at: Date.now() },
      })),
      options,
    );
    await client.query(
      `INSERT INTO chaos.orders (event_id, aggregate_id, sequence, committed_at)
       SELECT e, a, s, clock_timestamp() FROM unnest($1::uuid[], $2::text[], $3::int[]) AS t(e, a, s)`,
      [results.map((r) => r.eventId), aggregates, results.map((r) => r.sequence)],
    );
    if (rollback) {
      await client.query('ROLLBACK');
      counts.rolledBackEvents += aggregates.length;
    } else {
      await client.query('COMMIT');
      counts.committedTx++;
      counts.committedEvents += aggregates.length;
    }
    client.off('error', onError);
    client.release();
  } catch (error) {
    counts.failedTx++;
    client.off('error', onError);
    client.release(error);
    throw error;
  }
}

async function worker() {
  while (!stopping) {
    if (paused) {
      await sleep(100);
      continue;
    }
    try {
      await transaction();
    } catch (error) {
      logger.debug({ err: error.message }, 'transaction failed');
      await sleep(100 + Math.random() * 400);
    }
  }
}

const workers = Array.from({ length: cfg.concurrency }, () => worker());
const print = reportStats(() => counts);
onStop(async () => {
  stopping = true;
  await Promise.race([Promise.all(workers), sleep(5000)]);
  await pool.end();
}, print);
logger.info({ via: cfg.via ?? 'table' }, 'producing');
