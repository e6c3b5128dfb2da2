/**
 * Checks of a runner's `errorCode` beyond the suite's: the database's faults keep their code, a
 * handler's own network failure (a service it calls is down) does not pass for the database's.
 */
import { expect, it } from 'vitest';
import type { TransactionRunner } from '../../src/adapters/transactions.js';

export function runnerFaults<Tx>(
  open: () => { runner: TransactionRunner<Tx>; close(): Promise<void> },
): void {
  it('a handler’s own ECONNREFUSED is not the database’s; a killed backend is', async () => {
    const { runner, close } = open();
    try {
      const refused = Object.assign(new Error('fetch failed'), {
        cause: Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:443'), { code: 'ECONNREFUSED' }),
      });
      const thrown = await runner
        .transaction(async () => {
          throw refused;
        })
        .catch((e: unknown) => e);
      expect(thrown).toBe(refused);
      expect(runner.errorCode(thrown)).toBeUndefined();

      const killed = await runner
        .transaction((_tx, sql) =>
          sql.query({ text: 'SELECT pg_terminate_backend(pg_backend_pid())', values: [] }),
        )
        .catch((e: unknown) => e);
      expect(killed).toBeInstanceOf(Error);
      expect(runner.errorCode(killed)).toMatch(/^(57P01|08[0-9A-Z]{3}|E[A-Z]+)$/);
    } finally {
      await close();
    }
  });
}
