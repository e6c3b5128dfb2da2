/**
 * What a Redis Streams publish writes: the `XADD` (or the guarded `EVALSHA`) arguments of a
 * message — its stream key, the envelope fields, the payload field last, the `MAXLEN` trim and
 * the dedup guard key.
 *
 * Redis Streams has no CloudEvents binding, so the fields follow the MQTT 5 binding's layout
 * (user properties): the message's own headers as they are, then each attribute under its
 * own name (`id`, `source`, … `datacontenttype`), raw UTF-8 — a stream field is binary-safe,
 * nothing needs encoding — then `payload`, the data bytes.
 */
import { createHash } from 'node:crypto';
import type { RedisArgument } from 'redis';
import { envelopeHeaders } from '../../envelope/bindings.js';
import { ceSourceOf } from '../../envelope/ce-source.js';
import { errorMessage } from '../../errors.js';
import type { OutboxMessage, PublishOutcome } from '../contract.js';
import { asBuffer } from '../core/bytes.js';
import { permanent } from '../core/outcomes.js';

/** Name of the stream-entry field that carries the payload bytes (the other fields are the envelope). */
export const PAYLOAD_FIELD = 'payload';

const DEFAULT_DEDUP_WINDOW_MS = 86_400_000;
const DEFAULT_KEY_PREFIX = 'tx-outbox';

/**
 * KEYS[1] stream, KEYS[2] guard; ARGV[1] window (ms), ARGV[2] MAXLEN count or '', ARGV[3] '~'
 * or '=', ARGV[4..] field/value pairs. The XADD is the script's first write: if it fails
 * (WRONGTYPE, OOM …) the script stops before anything was written, so the entry and its
 * guard are written both or neither (Redis scripts do not roll back earlier writes).
 */
export const APPEND_SCRIPT = `local old = redis.call('GET', KEYS[2])
if old then return {0, old} end
local id
if ARGV[2] == '' then
  id = redis.call('XADD', KEYS[1], '*', unpack(ARGV, 4))
else
  id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[3], ARGV[2], '*', unpack(ARGV, 4))
end
redis.call('SET', KEYS[2], id, 'PX', ARGV[1])
return {1, id}`;

export const APPEND_SHA = createHash('sha1').update(APPEND_SCRIPT).digest('hex');

/** How every message of a publisher is appended, as command arguments. */
export interface AppendRule {
  /** The guard's expiry in ms; undefined: no guard (a plain `XADD`). */
  readonly window: string | undefined;
  /** `<keyPrefix>:dedup:`, followed by the event id. */
  readonly guardPrefix: string;
  /** The `MAXLEN` count, or '' for no trimming. */
  readonly trimCount: string;
  /** `~` (approximate) or `=`. */
  readonly trimMode: '~' | '=';
  /** CloudEvents `source`, checked (a URI-reference). */
  readonly source: string;
}

/** The append rule of the options, with their defaults; throws naming `ceSource` when it is not a URI-reference. */
export function appendRule(options: {
  readonly dedupWindowMs?: number | undefined;
  readonly keyPrefix?: string | undefined;
  readonly maxLen?: { readonly count: number; readonly approximate?: boolean | undefined } | undefined;
  readonly ceSource?: string | undefined;
}): AppendRule {
  const window = options.dedupWindowMs ?? DEFAULT_DEDUP_WINDOW_MS;
  return Object.freeze({
    window: window > 0 ? String(window) : undefined,
    guardPrefix: `${options.keyPrefix ?? DEFAULT_KEY_PREFIX}:dedup:`,
    trimCount: options.maxLen === undefined ? '' : String(options.maxLen.count),
    trimMode: options.maxLen?.approximate === false ? '=' : '~',
    source: ceSourceOf(options.ceSource),
  });
}

/** A message ready to send. */
export interface Command {
  readonly index: number;
  readonly eventId: string;
  readonly stream: string;
  readonly args: RedisArgument[];
}

/**
 * The command of `message` (at `index` in its batch): its stream key from `destination`, and
 * the arguments. A message Redis would refuse outright (no usable key) gets its permanent
 * outcome instead.
 */
export function appendCommand(
  message: OutboxMessage,
  index: number,
  destination: (message: OutboxMessage) => string,
  rule: AppendRule,
): Command | PublishOutcome {
  let stream: string;
  try {
    stream = destination(message);
  } catch (error) {
    return permanent(`The stream function threw for event ${message.eventId}: ${errorMessage(error)}`, error);
  }
  if (typeof stream !== 'string' || stream === '') {
    return permanent(
      `Invalid stream key ${JSON.stringify(stream)} for event ${message.eventId}: it must be a non-empty string`,
    );
  }
  const args: RedisArgument[] =
    rule.window === undefined
      ? rule.trimCount === ''
        ? ['XADD', stream, '*']
        : ['XADD', stream, 'MAXLEN', rule.trimMode, rule.trimCount, '*']
      : [
          'EVALSHA',
          APPEND_SHA,
          '2',
          stream,
          rule.guardPrefix + message.eventId,
          rule.window,
          rule.trimCount,
          rule.trimMode,
        ];
  const envelope = envelopeHeaders(message, rule.source, 'redis');
  for (const field in envelope) {
    // A header named `payload` in any case would pass for the data field (rows of earlier versions).
    if (field.toLowerCase() === PAYLOAD_FIELD && Object.hasOwn(message.headers, field)) continue;
    args.push(field, envelope[field]!);
  }
  args.push(PAYLOAD_FIELD, asBuffer(message.payload));
  return { index, eventId: message.eventId, stream, args };
}

/** `SCRIPT LOAD` of the append script (sent in front of the first EVALSHAs, and after a NOSCRIPT). */
export function scriptLoad(): RedisArgument[] {
  return ['SCRIPT', 'LOAD', APPEND_SCRIPT];
}
