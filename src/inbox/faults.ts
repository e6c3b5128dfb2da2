/**
 * How the inbox tells a fault of the database from a failure of the handler, by the code its
 * transaction runner finds under an error (`TransactionRunner.errorCode`): a lost race or a lost
 * connection is not the event's fault (nothing was committed; the adapter redelivers, no attempt
 * charged); anything else the handler's call led to is charged to it.
 */
import { CONFLICT_PG_CODES } from '../errors.js';
import { isUnreachableCode } from '../network-errors.js';

/** `conflict`: a serialization failure or deadlock. `lost`: the connection to the database ended. */
export type DatabaseFault = 'conflict' | 'lost';

/** Class 08 (connection exception) and the server's shutdowns: admin, crash, cannot connect now. */
const LOST = /^(08[0-9A-Z]{3}|57P0[123])$/;

/** What `code` (a SQLSTATE or a Node network code) says of the database, or undefined: not its fault. */
export function databaseFault(code: string | undefined): DatabaseFault | undefined {
  if (code === undefined) return undefined;
  if (CONFLICT_PG_CODES.has(code)) return 'conflict';
  if (LOST.test(code) || isUnreachableCode(code)) return 'lost';
  return undefined;
}

/**
 * True for the runners' TXO_TRANSACTION_ABORTED: the handler caught a failed statement's error and
 * returned, so nothing was committed — the handler's failure, never `processed`.
 */
export function isAbortedTransaction(error: unknown, depth = 0): boolean {
  if (error === null || typeof error !== 'object' || depth > 4) return false;
  // Under the runner's own error, if it wrapped it.
  const e = error as { code?: unknown; cause?: unknown };
  return e.code === 'TXO_TRANSACTION_ABORTED' || isAbortedTransaction(e.cause, depth + 1);
}
