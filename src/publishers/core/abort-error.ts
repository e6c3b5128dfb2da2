import { errorMessage } from '../../errors.js';

/** An Error named `AbortError` for a signal's `reason` (kept as its cause). */
export function abortError(reason: unknown): Error {
  const error = new Error(`Aborted: ${errorMessage(reason)}`, { cause: reason });
  error.name = 'AbortError';
  return error;
}
