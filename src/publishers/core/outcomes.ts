import { PublishError } from '../../errors.js';
import { failed, type PublishOutcome } from '../contract.js';

/** A failure a retry cannot cure: the event goes dead. */
export function permanent(message: string, cause?: unknown): PublishOutcome {
  return failed(new PublishError(message, { retryable: false, cause }), false);
}
