import { abortError } from './abort-error.js';

/**
 * Why a publish call (or one request of it) stopped waiting: the caller's signal aborted
 * (`caller`: the relay's shutdown or its own publish deadline), the publisher is closing
 * (`closed`), or the call's own time limit passed (`timeout`).
 */
export type AbortCause = 'caller' | 'closed' | 'timeout';

export interface CallAbortOptions {
  /** The caller's signal (the `signal` argument of `publish()`). */
  readonly signal: AbortSignal;
  /** The publisher's closing signal ({@link PublisherLifecycle.closing}), when close() must end the call. */
  readonly closing?: AbortSignal | undefined;
  /** The call's own time limit in ms; none when undefined. */
  readonly timeoutMs?: number | undefined;
  /** The message of the `TimeoutError` (default `Timed out after <timeoutMs> ms`). */
  readonly timeoutMessage?: string | undefined;
}

/**
 * The one abort of a publish call: the caller's signal, the publisher's close and the call's time
 * limit folded into one cause, one AbortSignal (for client APIs that take one, e.g. fetch), one
 * promise that rejects (to race set-up steps against), and listeners (to settle what was sent).
 * One timer and one listener per source whatever the number of messages waiting on it;
 * `dispose()` removes them all and must be called when the call ends.
 *
 * Its {@link reason} (the signal's reason, what `aborted` rejects with) is the caller's own reason
 * as given (`caller`), an `AbortError` (`closed`) or a `TimeoutError` (`timeout`); a publisher turns
 * it into its own PublishError wording from {@link cause}.
 */
export class CallAbort {
  readonly #controller = new AbortController();
  readonly #listeners = new Set<(cause: AbortCause, reason: unknown) => void>();
  readonly #caller: AbortSignal;
  readonly #closing: AbortSignal | undefined;
  readonly #timer: NodeJS.Timeout | undefined;
  readonly #timeoutMessage: string;
  #cause: AbortCause | undefined;
  #reason: unknown;
  #aborted: Promise<never> | undefined;
  #rejectAborted: ((reason: unknown) => void) | undefined;

  constructor(options: CallAbortOptions) {
    this.#caller = options.signal;
    this.#closing = options.closing;
    this.#timeoutMessage = options.timeoutMessage ?? `Timed out after ${options.timeoutMs} ms`;
    if (this.#caller.aborted) this.#onCaller();
    else if (this.#closing?.aborted) this.#onClosing();
    if (this.#cause !== undefined) return;
    this.#caller.addEventListener('abort', this.#onCaller, { once: true });
    this.#closing?.addEventListener('abort', this.#onClosing, { once: true });
    if (options.timeoutMs !== undefined) {
      this.#timer = setTimeout(() => this.#abort('timeout'), options.timeoutMs);
    }
  }

  /** Aborts, with {@link reason}, on the first cause. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  get cause(): AbortCause | undefined {
    return this.#cause;
  }

  /** Undefined until aborted; then the caller's reason, or the closed or timeout error. */
  get reason(): unknown {
    return this.#reason;
  }

  /** Rejects with {@link reason} on the first cause; never resolves. Made on first use. */
  get aborted(): Promise<never> {
    if (this.#aborted === undefined) {
      this.#aborted = new Promise<never>((_, reject) => {
        this.#rejectAborted = reject;
      });
      this.#aborted.catch(() => undefined); // observed even when nothing races against it
      if (this.#cause !== undefined) this.#rejectAborted?.(this.#reason);
    }
    return this.#aborted;
  }

  /**
   * Calls `listener` once on the first cause (at once when it is already aborted); returns the
   * function that removes it.
   */
  onAbort(listener: (cause: AbortCause, reason: unknown) => void): () => void {
    if (this.#cause !== undefined) {
      listener(this.#cause, this.#reason);
      return () => undefined;
    }
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Settles like `promise`, or rejects with {@link reason} first. */
  race<T>(promise: Promise<T>): Promise<T> {
    if (this.#cause !== undefined) {
      promise.catch(() => undefined);
      return Promise.reject(this.#reason);
    }
    return Promise.race([promise, this.aborted]);
  }

  /** Removes the timer and the listeners on the caller's and the closing signal. */
  dispose(): void {
    clearTimeout(this.#timer);
    this.#caller.removeEventListener('abort', this.#onCaller);
    this.#closing?.removeEventListener('abort', this.#onClosing);
    this.#listeners.clear();
  }

  readonly #onCaller = (): void => this.#abort('caller');
  readonly #onClosing = (): void => this.#abort('closed');

  #abort(cause: AbortCause): void {
    if (this.#cause !== undefined) return;
    this.#cause = cause;
    this.#reason = causeReason(cause, this.#caller.reason, this.#timeoutMessage);
    clearTimeout(this.#timer);
    this.#caller.removeEventListener('abort', this.#onCaller);
    this.#closing?.removeEventListener('abort', this.#onClosing);
    this.#rejectAborted?.(this.#reason);
    this.#controller.abort(this.#reason);
    for (const listener of [...this.#listeners]) listener(cause, this.#reason);
    this.#listeners.clear();
  }
}

function causeReason(cause: AbortCause, callerReason: unknown, timeoutMessage: string): unknown {
  if (cause === 'caller') return callerReason;
  if (cause === 'closed') return abortError(new Error('the publisher was closed'));
  const error = new Error(timeoutMessage);
  error.name = 'TimeoutError';
  return error;
}
