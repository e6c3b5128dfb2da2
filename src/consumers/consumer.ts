/** A running consumer adapter. */
export interface Consumer {
  /** Stops reading, waits for in-flight deliveries to be handled and acknowledged, closes what it opened. Idempotent. */
  stop(): Promise<void>;
}

/** Key of a delivery in the KeyedQueue: one aggregate at a time. */
export { aggregateKey } from '../aggregate-key.js';
