/**
 * What a relay knows of its own health, read by the readiness check of `/readyz`: the neutral
 * core both relays (polling and CDC) fill in and `ops/readiness.ts` reads.
 */
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
