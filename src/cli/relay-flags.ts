/** The flags of `tx-outbox relay`, as commander hands them over (src/cli/relay.ts registers them). */

import type { DatabaseCommandOptions } from './command.js';
import type { MetricsFlags } from './metrics-endpoint.js';

export interface RelayCliOptions extends DatabaseCommandOptions, MetricsFlags {
  readonly nats?: string;
  readonly natsStream?: string;
  /** `poll`, `cdc`, or (deprecated) the CloudEvents source. */
  readonly source?: string;
  readonly ceSource?: string;
  readonly slot?: string;
  readonly publication?: string;
  readonly heartbeat?: string;
  readonly silenceTimeout?: string;
  readonly acceptWalFormat1?: boolean;
  readonly natsSubjects?: string[];
  readonly webhook?: string;
  readonly webhookSecret?: string;
  readonly webhookSecretFile?: string;
  readonly kafka?: string;
  readonly rabbitmq?: string;
  readonly rabbitmqExchange?: string;
  readonly redis?: string;
  readonly mqtt?: string;
  readonly config?: string;
  readonly batchSize?: number;
  readonly pollInterval?: number;
  readonly lease?: number;
  readonly maxAttempts?: number;
  readonly gapGrace?: number;
  readonly relayId?: string;
  readonly listen: boolean;
  readonly history?: boolean;
  readonly historyDays?: number;
  readonly historyPayloads?: boolean;
  readonly prune?: boolean;
  readonly pruneInterval?: string;
}

/** A comma-separated flag value as a list, blanks dropped. */
export function commaList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}
