/** The chaos profiles: how much load, how many processes, how many faults, how long. */
export interface Profile {
  readonly name: 'short' | 'long';
  readonly producers: number;
  readonly relays: number;
  readonly consumers: number;
  /** Events per second all producers aim at together (rolled-back ones excluded). */
  readonly eventsPerSecond: number;
  /** Producers run until this many events committed (and the fault phase ended)… */
  readonly events: number;
  /** …but never longer than this. */
  readonly maxProducingSeconds: number;
  /** Faults, spread over the fault phase. */
  readonly faults: number;
  readonly faultPhaseSeconds: number;
  /**
   * The CDC relay's fault phase: its quiet periods hold the schedule up (each shifts the faults
   * after it by its own length), so the short profile draws its faults over less time.
   */
  readonly cdcFaultPhaseSeconds: number;
  /** Load before the first fault. */
  readonly warmupSeconds: number;
  /** Bounded wait for everything committed to be applied once faults and producers stopped. */
  readonly drainTimeoutSeconds: number;
  readonly aggregates: number;
  /** Share of producer transactions rolled back on purpose (after their enqueue). */
  readonly rollbackShare: number;
  readonly maxEventsPerTransaction: number;
  /** Upper bounds of the random fault durations, seconds. */
  readonly maxStopSeconds: number;
  readonly maxStallSeconds: number;
  readonly maxLatencySeconds: number;
}

export const PROFILES: Readonly<Record<Profile['name'], Profile>> = {
  short: {
    name: 'short',
    producers: 2,
    relays: 2,
    consumers: 1,
    eventsPerSecond: 150,
    events: 0,
    maxProducingSeconds: 110,
    faults: 16,
    faultPhaseSeconds: 95,
    cdcFaultPhaseSeconds: 65,
    warmupSeconds: 5,
    drainTimeoutSeconds: 50,
    aggregates: 300,
    rollbackShare: 0.1,
    maxEventsPerTransaction: 3,
    maxStopSeconds: 6,
    maxStallSeconds: 6,
    maxLatencySeconds: 6,
  },
  long: {
    name: 'long',
    producers: 3,
    relays: 3,
    consumers: 2,
    eventsPerSecond: 320,
    events: 200_000,
    // A bound, not a target: the CDC relay's run pauses its producers in quiet periods, and a
    // loaded machine paces them below their rate.
    maxProducingSeconds: 1_500,
    faults: 110,
    faultPhaseSeconds: 640,
    cdcFaultPhaseSeconds: 640,
    warmupSeconds: 10,
    drainTimeoutSeconds: 120,
    aggregates: 2_000,
    rollbackShare: 0.1,
    maxEventsPerTransaction: 4,
    maxStopSeconds: 20,
    maxStallSeconds: 15,
    maxLatencySeconds: 10,
  },
};
