import { abortedTransaction, type SqlExecutor } from './transactions.js';

/**
 * One cheap statement after the handler: on a transaction aborted by a failed statement whose
 * error was caught, PostgreSQL refuses it (25P02) — where COMMIT would silently roll back.
 */
export async function probeAborted(
  sql: SqlExecutor,
  errorCode: (error: unknown) => string | undefined,
): Promise<void> {
  try {
    await sql.query({ text: 'SELECT 1', values: [] });
  } catch (error) {
    if (errorCode(error) === '25P02') throw abortedTransaction();
    throw error;
  }
}
