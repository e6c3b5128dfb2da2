/** What a relay knows of its own health, read by the readiness check of `/readyz`. */
export interface RelayHealth {
  readonly relayId: string;
  readonly schema: string;
  /** The publisher's name (`nats`, `webhook`, `router` …). */
  readonly publisher: string;
  /** Started and not stopped (or stopping). */
  readonly running: boolean;
  /** Partitions this relay holds now. */
  readonly partitions: number;
  /**
   * Since when the broker refuses publishes as unreachable (`TXO_BROKER_UNAVAILABLE`), from the
   * relay's outage log; undefined while publishes get through. A relay with nothing to publish
   * does not learn of a broker that went down until its next publish.
   */
  readonly brokerUnavailableSince: Date | undefined;
  /**
   * Whether the broker answered a publish of this relay yet (took it, or refused it for a
   * reason of its own); absent (a health source of your own): taken as answered. Until it did,
   * nothing says the broker can be reached.
   */
  readonly brokerAnswered?: boolean;
  /** Before the broker's first answer: since when a publish call has been waiting for it, if one is. */
  readonly firstPublishWaitingSince?: Date | undefined;
  /** The last loop error (database or publisher), redacted. */
  readonly lastError: string | undefined;
  /**
   * Loop errors in a row (a claim or outcome statement that keeps failing: the database refuses
   * it, a grant is missing …); 0 once a batch goes through. Readiness fails from
   * {@link LOOP_ERRORS_NOT_READY} on.
   */
  readonly loopErrorsInARow: number;
}

/** Loop errors in a row from which a relay is not ready: it republishes and records nothing. */
export const LOOP_ERRORS_NOT_READY = 3;

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
