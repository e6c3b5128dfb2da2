/**
 * The options every consumer adapter takes, and their defaults. Each adapter resolves its
 * options once (old spellings renamed, checked, defaults filled in) into a frozen object: see
 * `nats-options.ts`, `redis-options.ts`, `rabbitmq-options.ts`, `mqtt-options.ts`,
 * `kafka/options.ts`, `webhook-options.ts`.
 */
import type { PoolClient } from 'pg';
import type { Inbox, InboxHandler } from '../inbox/inbox.js';
import { type Logger, silentLogger } from '../logger.js';
import { checkExactlyOne } from '../options/checks.js';

/** What every consumer adapter takes. */
export interface ConsumerOptions<T = unknown, Tx = PoolClient> {
  readonly inbox: Inbox<T, Tx>;
  readonly handler: InboxHandler<T, Tx>;
  /** Deliveries handled at once (across aggregates). Default 16. */
  readonly concurrency?: number;
  /** Aborting it stops the consumer (like `stop()`). */
  readonly signal?: AbortSignal;
  readonly logger?: Logger;
}

/** {@link ConsumerOptions} with the defaults filled in. */
export interface ResolvedConsumerOptions<T = unknown, Tx = PoolClient>
  extends Omit<ConsumerOptions<T, Tx>, 'concurrency' | 'logger'> {
  readonly concurrency: number;
  readonly logger: Logger;
}

/** Deliveries handled at once when `concurrency` is not given. */
export const DEFAULT_CONCURRENCY = 16;

/** The shared defaults (the options are checked by the adapter's own resolution). */
export function consumerDefaults(options: { readonly concurrency?: number; readonly logger?: Logger }): {
  readonly concurrency: number;
  readonly logger: Logger;
} {
  return { concurrency: options.concurrency ?? DEFAULT_CONCURRENCY, logger: options.logger ?? silentLogger };
}

/** Exactly one way to the broker: `url` (`hasUrl`: a usable one was given) or an existing `client`. */
export function checkConsumerAddress(options: { readonly client?: unknown }, hasUrl: boolean): void {
  checkExactlyOne('url', 'client', hasUrl, options.client !== undefined);
}
