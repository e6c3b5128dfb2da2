// What every chaos component shares: its config (TXO_CHAOS, JSON), a pino logger on stderr,
// a pg pool that survives idle-connection errors (as any app sets it up), one stats line per
// second on stdout, a graceful stop on SIGTERM, and an exit when the harness goes away.
import pg from 'pg';
import { pino } from 'pino';

export const cfg = JSON.parse(process.env.TXO_CHAOS ?? '{}');
export const logger = pino({ level: cfg.logLevel ?? 'info', base: { c: cfg.name } }, pino.destination(2));

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A pool as an application configures it: an idle client's error is logged, never fatal. */
export function newPool(max) {
  const pool = new pg.Pool({ connectionString: cfg.databaseUrl, max, connectionTimeoutMillis: 10_000 });
  pool.on('error', (error) => logger.warn({ err: error.message }, 'idle database connection failed'));
  return pool;
}

/** `stats()` printed every second, and once more at a graceful stop. */
export function reportStats(stats) {
  const print = () => process.stdout.write(`${JSON.stringify({ stats: stats() })}\n`);
  setInterval(print, 1000).unref();
  return print;
}

/** SIGTERM: `stop()` then a last stats line and exit 0. The harness's end (stdin closed) exits at once. */
export function onStop(stop, print) {
  let stopping = false;
  process.on('SIGTERM', async () => {
    if (stopping) return;
    stopping = true;
    try {
      await stop();
    } catch (error) {
      logger.error({ err: error.message }, 'graceful stop failed');
    }
    print();
    process.exit(0);
  });
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}

/** Retries `fn` until it resolves, as a service does at start-up when a dependency is not up yet. */
export async function untilStarted(what, fn) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (error) {
      logger.warn({ err: error.message, attempt }, `${what} failed to start; retrying`);
      await sleep(Math.min(5000, 250 * attempt));
    }
  }
}
