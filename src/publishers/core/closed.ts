import { BROKER_UNAVAILABLE, errorMessage, OutboxError, PublishError } from '../../errors.js';
import { redactText } from '../../redact.js';

export const PUBLISHER_CLOSED = 'TXO_PUBLISHER_CLOSED';

/** What `publish()` rejects with after `close()`: `The <broker> publisher is closed[: hint]`. */
export function publisherClosed(broker: string, hint?: string): OutboxError {
  const message = `The ${broker} publisher is closed${hint === undefined ? '' : `: ${hint}`}`;
  return new OutboxError(message, { code: PUBLISHER_CLOSED });
}

export function isPublisherClosed(error: unknown): boolean {
  return error instanceof OutboxError && error.code === PUBLISHER_CLOSED;
}

/**
 * The verdict on a failed connect: closed meanwhile (retryable), else the broker is not
 * available at `where` (retryable, `BROKER_UNAVAILABLE`: no attempt is charged).
 */
export function connectError(broker: string, where: string, error: unknown): PublishError {
  if (isPublisherClosed(error)) {
    return new PublishError(`The ${broker} publisher was closed while connecting`, {
      retryable: true,
      cause: error,
    });
  }
  return new PublishError(`${broker} is not available (${where}): ${redactText(errorMessage(error))}`, {
    retryable: true,
    code: BROKER_UNAVAILABLE,
    cause: error,
  });
}
