import { errorMessage } from '../../errors.js';

export interface AbortWatch {
  readonly signal: AbortSignal;
  /** Rejects with an AbortError when the signal aborts; never resolves. */
  readonly aborted: Promise<never>;
  dispose(): void;
}

/** One abort listener per batch, however many messages race against it. */
export function watchAbort(signal: AbortSignal): AbortWatch {
  let onAbort = (): void => undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(abortError(signal.reason));
  });
  aborted.catch(() => undefined); // observed even when no message is waiting
  if (signal.aborted) onAbort();
  else signal.addEventListener('abort', onAbort, { once: true });
  return { signal, aborted, dispose: () => signal.removeEventListener('abort', onAbort) };
}

/** An Error named `AbortError` for a signal's `reason` (kept as its cause). */
export function abortError(reason: unknown): Error {
  const error = new Error(`Aborted: ${errorMessage(reason)}`, { cause: reason });
  error.name = 'AbortError';
  return error;
}
