import type { RelayHealth } from '../core/relay-health.js';

export { LOOP_ERRORS_NOT_READY, type RelayHealth } from '../core/relay-health.js';

/**
 * What a relay knows of its broker before an outage can tell: whether any publish call was
 * answered by the broker yet, and since when the calls in flight have been waiting. A relay
 * whose broker was never reachable waits out a whole connect timeout on its first publish
 * before it learns of the outage; meanwhile its readiness must not say the publishes get through.
 */
export class BrokerContact {
  #answered = false;
  #inFlight = 0;
  #since: number | undefined;

  constructor(private readonly now: () => number = Date.now) {}

  /** Whether the broker answered a publish call yet. */
  get answered(): boolean {
    return this.#answered;
  }

  /** Since when publish calls have been in flight (the oldest run of them), or undefined. */
  get waitingSince(): number | undefined {
    return this.#since;
  }

  /** A publish call starts. */
  calling(): void {
    if (this.#inFlight === 0) this.#since = this.now();
    this.#inFlight += 1;
  }

  /** A publish call ended; `answered`: the broker took or refused at least one of its messages itself. */
  called(answered: boolean): void {
    this.#inFlight = Math.max(0, this.#inFlight - 1);
    if (this.#inFlight === 0) this.#since = undefined;
    if (answered) this.#answered = true;
  }

  /** The health fields it fills in. */
  health(): Pick<RelayHealth, 'brokerAnswered' | 'firstPublishWaitingSince'> {
    const since = this.#answered ? undefined : this.#since;
    return {
      brokerAnswered: this.#answered,
      firstPublishWaitingSince: since === undefined ? undefined : new Date(since),
    };
  }
}
