import { OutboxValidationError } from '../../errors.js';
import { routedType } from '../../skip-marker.js';
import type { OutboxMessage } from '../contract.js';

/**
 * `message.topic`, else `${aggregateType}.${type}`: the default subject, topic, routing key or
 * stream. A skip marker (`dead skip`) goes where the event it stands for would have gone.
 */
export function defaultDestination(message: OutboxMessage): string {
  return message.topic !== null && message.topic !== ''
    ? message.topic
    : `${message.aggregateType}.${routedType(message)}`;
}

/** Where a publisher sends a message: a subject, topic, routing key or stream, per message. */
export type DestinationOf = (message: OutboxMessage) => string;

/**
 * A publisher's `destination` option, checked when the publisher is created: a function, or
 * `fallback` when it is absent. Anything else would let every event go dead at publish time
 * ("destination is not a function"), so it is refused here, named as the caller spelled it:
 * `old`, the deprecated spelling, when that is what `given` (the options before the renames) holds.
 *
 * @throws OutboxValidationError naming the option and the fix.
 */
export function destinationOption(
  given: object,
  old: string,
  value: unknown,
  fallback: DestinationOf,
): DestinationOf {
  if (value === undefined) return fallback;
  if (typeof value === 'function') return value as DestinationOf;
  const spelled = given as Readonly<Record<string, unknown>>;
  const field = spelled['destination'] === undefined && spelled[old] !== undefined ? old : 'destination';
  const example =
    typeof value === 'string' && value !== '' ? JSON.stringify(value.slice(0, 100)) : "'orders'";
  throw new OutboxValidationError(
    field,
    `must be a function (message) => string, got ${describe(value)}`,
    `Pass a function of the message, e.g. \`${field}: () => ${example}\` for one fixed destination, or leave it out for the publisher's default`,
  );
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'string') return `a string (${JSON.stringify(value.slice(0, 100))})`;
  return `${typeof value === 'object' ? 'an' : 'a'} ${typeof value}`;
}
