import { publisherClosed } from './closed.js';

/**
 * The open/closing/closed state every publisher keeps: `publish()` after `close()` rejects with
 * `TXO_PUBLISHER_CLOSED`, `close()` is idempotent (every call gets the same promise), and the
 * `closing` signal aborts the calls still waiting (hand it to {@link CallAbort}).
 */
export class PublisherLifecycle {
  readonly #broker: string;
  readonly #closing = new AbortController();
  #closed: Promise<void> | undefined;

  /** `broker` as it reads in messages: `NATS`, `Kafka`, `RabbitMQ` … */
  constructor(broker: string) {
    this.#broker = broker;
  }

  /** True from the first `close()` on. */
  get isClosed(): boolean {
    return this.#closed !== undefined;
  }

  /** Aborts when `close()` is first called. */
  get closing(): AbortSignal {
    return this.#closing.signal;
  }

  /** Throws the closed error (`The <broker> publisher is closed[: hint]`) after `close()`. */
  assertOpen(hint?: string): void {
    if (this.#closed !== undefined) throw publisherClosed(this.#broker, hint);
  }

  /** Runs `shutdown` once, after aborting {@link closing}; later calls get the same promise. */
  close(shutdown: () => Promise<void>): Promise<void> {
    if (this.#closed === undefined) {
      this.#closing.abort(new Error(`the ${this.#broker} publisher was closed`));
      this.#closed = shutdown();
    }
    return this.#closed;
  }
}

/**
 * Waits for `closing` at most `timeoutMs`: true when it settled (resolved or rejected) in time,
 * false when the time ran out. Never rejects: a close that fails or hangs must not keep a
 * shutting-down process alive.
 */
export function closeWithin(closing: Promise<unknown>, timeoutMs: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
    timer.unref();
  });
  return Promise.race([
    closing.then(
      () => true,
      () => true,
    ),
    timeout,
  ]).finally(() => clearTimeout(timer));
}
