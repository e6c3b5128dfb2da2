/** The node-redis client a Redis publisher makes from `url`: created, connected once, closed. */
import { createClient } from 'redis';
import { errorMessage, OutboxValidationError } from '../../errors.js';
import { redactText } from '../../redact.js';
import { closeWithin } from '../core/lifecycle.js';
import type { RedisClientLike, ResolvedRedisOptions } from './options.js';

/** The node-redis client the publisher made from `url`. */
export interface OwnedClient extends RedisClientLike {
  connect(): Promise<unknown>;
  close(): Promise<void>;
  destroy(): void;
}

/**
 * The client for `url`, not connected yet: its offline queue disabled (commands are refused
 * while it reconnects instead of being kept), connecting for at most `timeoutMs`.
 */
export function createOwnedClient(
  url: string,
  clientOptions: ResolvedRedisOptions['clientOptions'],
  timeoutMs: number,
): OwnedClient {
  try {
    return createClient({
      ...clientOptions,
      socket: { connectTimeout: timeoutMs, ...clientOptions?.socket },
      url,
      // Commands are refused while reconnecting instead of queued for later.
      disableOfflineQueue: true,
    }) as unknown as OwnedClient;
  } catch (error) {
    throw new OutboxValidationError(
      'url',
      `is not a valid Redis URL (${redactText(errorMessage(error))})`,
      'Fix it',
    );
  }
}

/**
 * Closes an owned client: a ready one waits for the replies still due (late ones of timed-out
 * batches) at most `timeoutMs`; one connecting, or a close that failed or did not finish in
 * time, is destroyed.
 */
export async function closeOwnedClient(owned: OwnedClient, timeoutMs: number): Promise<void> {
  if (!owned.isOpen) return;
  if (owned.isReady) {
    let closed = false;
    await closeWithin(
      owned.close().then(() => {
        closed = true;
      }),
      timeoutMs,
    );
    if (closed) return;
  }
  try {
    owned.destroy(); // connecting, or a close that did not finish
  } catch {
    // already closed
  }
}
