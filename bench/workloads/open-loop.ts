/**
 * The steady producers of W2 and W6: `connections` connections, each running `body` on a fixed
 * schedule so that together they offer `rate` transactions per second for `seconds` (open loop:
 * every transaction has a scheduled start, a late one does not push the next back).
 */
import type pg from 'pg';

export interface OpenLoopOptions {
  readonly rate: number;
  readonly seconds: number;
  readonly connections: number;
}

/** Runs the producers; resolves with the transactions run and the seconds they took. */
export async function openLoop(
  pool: pg.Pool,
  options: OpenLoopOptions,
  body: (client: pg.PoolClient, connection: number, k: number) => Promise<void>,
): Promise<{ transactions: number; seconds: number }> {
  const { connections } = options;
  const perConnection = options.rate / connections;
  const now = (): number => performance.timeOrigin + performance.now();
  const started = now();
  const until = started + options.seconds * 1000;
  let transactions = 0;
  await Promise.all(
    Array.from({ length: connections }, async (_, c) => {
      const client = await pool.connect();
      try {
        for (let k = 0; ; k++) {
          const due = started + (k + c / connections) * (1000 / perConnection);
          if (due >= until) break;
          const wait = due - now();
          if (wait > 1) await new Promise((r) => setTimeout(r, wait));
          await body(client, c, k);
          transactions += 1;
        }
      } finally {
        client.release();
      }
    }),
  );
  return { transactions, seconds: (now() - started) / 1000 };
}
