/** The filter flags of `tx-outbox dead list | replay`: `--aggregate`, `--type`, `--since`. */
import type { DeadFilter } from '../ops/dead-letter.js';
import { usageError } from './common.js';
import { parseDuration, RETENTION } from './duration.js';

/** The flags as commander hands them over. */
export interface DeadFilterFlags {
  readonly aggregate?: string;
  readonly aggregateType?: string;
  readonly aggregateId?: string;
  readonly type?: string;
  readonly since?: string;
}

/** An ISO 8601 time: a date, optionally with a time and zone. */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)?)?$/i;

/** `--since`: an ISO time (`2026-12-01T09:00Z`) or a duration back from `now` (`2h`, `30m`, `7d`). */
export function parseSince(value: string, now: Date = new Date()): Date {
  if (ISO_TIME.test(value)) {
    const at = new Date(value);
    if (!Number.isNaN(at.getTime())) return at;
    throw usageError(`--since ${value} is not a valid time`);
  }
  if (/^\d+(ms|s|m|h|d)$/.test(value))
    return new Date(now.getTime() - parseDuration('--since', value, RETENTION));
  throw usageError(
    `--since needs an ISO time such as 2026-12-01T09:00Z, or a duration back from now such as 2h, 30m or 7d (got ${JSON.stringify(value)})`,
  );
}

/** The filter the flags ask for; `--aggregate <type>/<id>` splits at the first slash. */
export function deadFilterOf(flags: DeadFilterFlags, now: Date = new Date()): DeadFilter {
  let aggregateType = flags.aggregateType;
  let aggregateId = flags.aggregateId;
  if (flags.aggregate !== undefined) {
    if (aggregateType !== undefined || aggregateId !== undefined) {
      throw usageError('give --aggregate <type>/<id>, or --aggregate-type and --aggregate-id, not both');
    }
    const slash = flags.aggregate.indexOf('/');
    if (slash <= 0 || slash === flags.aggregate.length - 1) {
      throw usageError(
        `--aggregate needs <type>/<id>, e.g. order/42 (got ${JSON.stringify(flags.aggregate)}); ` +
          'for a type with a slash in it use --aggregate-type and --aggregate-id',
      );
    }
    aggregateType = flags.aggregate.slice(0, slash);
    aggregateId = flags.aggregate.slice(slash + 1);
  }
  for (const [flag, value] of [
    ['--aggregate-type', aggregateType],
    ['--aggregate-id', aggregateId],
    ['--type', flags.type],
  ] as const) {
    if (value === '') throw usageError(`${flag} needs a value`);
  }
  return {
    ...(aggregateType !== undefined ? { aggregateType } : {}),
    ...(aggregateId !== undefined ? { aggregateId } : {}),
    ...(flags.type !== undefined ? { type: flags.type } : {}),
    ...(flags.since !== undefined ? { since: parseSince(flags.since, now) } : {}),
  };
}
