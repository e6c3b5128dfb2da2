/**
 * The rules for an event's names: `aggregateType` and `type` (CloudEvents attributes, and
 * the default topic `<aggregateType>.<type>`), `aggregateId` (a Kafka key, the `subject` and
 * `aggregateid` attributes on every binding) and `topic` (a NATS subject, an MQTT topic, a
 * RabbitMQ routing key, a Redis stream key, a webhook endpoint key). Anything accepted here can
 * travel on every transport; anything refused names the field and the fix.
 */
import { OutboxValidationError } from '../errors.js';
import { EDGE_WHITESPACE, uncarriedCharacter, uncarriedProblem } from './text.js';

/** Longest aggregate type, type, aggregate id or topic, in UTF-8 bytes: an AMQP routing key's limit. */
export const MAX_NAME_BYTES = 255;

/** The common type: visible ASCII. Anything else takes the full checks. */
const PLAIN_IDENTIFIER = /^[\x21-\x7e]+$/;
/** The common id: printable ASCII. Anything else takes the full checks. */
const PLAIN_ID = /^[\x20-\x7e]+$/;
/**
 * The common topic: dot-separated tokens of visible ASCII other than the wildcards * > + # (and
 * the dot), not starting with `$`. Anything else takes the full checks.
 */
const PLAIN_TOPIC = /^[!"%-),\-/-=?-~][!"$-),\-/-=?-~]*(?:\.[!"$-),\-/-=?-~]+)*$/;

function requiredString(value: unknown, field: string, example: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new OutboxValidationError(
      field,
      value === undefined || value === null || value === '' ? 'is missing or empty' : `is a ${typeof value}`,
      `Pass a non-empty string, e.g. ${example}.`,
    );
  }
  // UTF-8 takes at most 3 bytes per UTF-16 code unit: count the bytes only when it can matter.
  const bytes = value.length * 3 > MAX_NAME_BYTES ? Buffer.byteLength(value) : value.length;
  if (bytes > MAX_NAME_BYTES) {
    throw new OutboxValidationError(
      field,
      `is ${bytes} bytes long in UTF-8`,
      `Keep it to ${MAX_NAME_BYTES}.`,
    );
  }
  return value;
}

function at(value: string, index: number): string {
  const code = value.codePointAt(index)!;
  return `${JSON.stringify(String.fromCodePoint(code))} (U+${code.toString(16).toUpperCase().padStart(4, '0')}) at index ${index}`;
}

/**
 * `aggregateType` or `type`: any CloudEvents String (Unicode text without control characters,
 * lone surrogates or noncharacters, inner spaces and non-ASCII included) that neither starts nor
 * ends with whitespace. The CloudEvents `type` is an identifier a receiver routes on: an edge
 * space would make two types that look the same. Every binding carries the rest byte for byte
 * (HTTP and NATS percent-encode `ce-type` and `ce-aggregatetype`; the AMQP `type` property is a
 * UTF-8 short string of at most 255 bytes, which {@link MAX_NAME_BYTES} keeps).
 */
export function identifierOf(value: unknown, field: string, example: string): string {
  const name = requiredString(value, field, example);
  if (PLAIN_IDENTIFIER.test(name)) return name;
  const bad = uncarriedCharacter(name);
  if (bad !== undefined) {
    throw new OutboxValidationError(
      field,
      `contains ${bad.code} (${bad.kind}) at index ${bad.index}, which a CloudEvents attribute cannot hold`,
      `Remove ${bad.code} (${bad.kind}), e.g. ${example}.`,
    );
  }
  if (EDGE_WHITESPACE.test(name)) {
    const index = /^\s/.test(name) ? 0 : name.length - 1;
    throw new OutboxValidationError(
      field,
      `${/^\s/.test(name) ? 'starts' : 'ends'} with whitespace (${at(name, index)}), which would look the same as the name without it`,
      `Trim it, e.g. ${example}.`,
    );
  }
  return name;
}

/**
 * A number, bigint or string id. A string may hold any CloudEvents String (any Unicode text
 * without control characters, lone surrogates or noncharacters), spaces at either end
 * included: every binding carries it byte for byte (HTTP and NATS percent-encode it).
 */
export function aggregateIdOf(value: unknown, field: string): string {
  if (typeof value === 'bigint') return String(value);
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) {
      throw new OutboxValidationError(
        field,
        `is ${value}, not a safe integer (its text would not be the id you meant)`,
        'Pass a string, a bigint, or an integer within ±2^53.',
      );
    }
    return String(value);
  }
  const id = requiredString(value, field, "'order-42'");
  if (PLAIN_ID.test(id)) return id;
  const bad = uncarriedCharacter(id);
  if (bad !== undefined) {
    throw new OutboxValidationError(
      field,
      `contains ${bad.code} (${bad.kind}) at index ${bad.index}, which a CloudEvents attribute cannot hold`,
      `Remove ${bad.code} (${bad.kind}): the id becomes a key and a header on every transport.`,
    );
  }
  return id;
}

/**
 * Why `topic` cannot be a destination on every transport, or undefined. `leading`: it starts the
 * destination (false for the `type` part of a default topic).
 */
function topicProblem(topic: string, leading = true): string | undefined {
  if (PLAIN_TOPIC.test(topic)) return undefined;
  const uncarried = uncarriedProblem(topic);
  if (uncarried !== undefined) return uncarried;
  const space = topic.search(/\s/);
  if (space !== -1) return `contains whitespace (${at(topic, space)}), which brokers refuse`;
  const wildcard = topic.search(/[*>+#]/);
  if (wildcard !== -1) {
    return `contains ${at(topic, wildcard)}: a wildcard of NATS (* >) or MQTT (+ #) subscriptions`;
  }
  if (leading && topic.startsWith('$'))
    return "starts with '$', which NATS ($JS, $SYS) and MQTT ($SYS) keep for the system";
  if (topic.startsWith('.') || topic.endsWith('.') || topic.includes('..')) {
    return 'has an empty token (a leading, trailing or double dot), which NATS refuses';
  }
  return undefined;
}

export function topicOf(value: unknown, field: string): string | null {
  if (value === undefined || value === null) return null;
  const topic = requiredString(value, field, "'orders.created'");
  const problem = topicProblem(topic);
  if (problem !== undefined) {
    throw new OutboxValidationError(
      field,
      `${JSON.stringify(topic.slice(0, 100))} ${problem}`,
      'Use letters, digits and . - _ (a topic every broker takes; Kafka also refuses / : and non-ASCII).',
    );
  }
  return topic;
}

/**
 * Without a topic, publishers send to `<aggregateType>.<type>` (MQTT: with `/` for `.`): it must
 * be a valid topic too.
 */
export function checkDefaultTopic(aggregateType: string, type: string, field: string): void {
  // Plain topics are ASCII: there the length is the byte count.
  if (aggregateType.length + type.length < MAX_NAME_BYTES && PLAIN_TOPIC.test(`${aggregateType}.${type}`))
    return;
  const fix = 'Change it, or pass a topic.';
  for (const [name, value] of [
    ['aggregateType', aggregateType],
    ['type', type],
  ] as const) {
    const problem = topicProblem(value, name === 'aggregateType');
    if (problem !== undefined) {
      throw new OutboxValidationError(
        `${field}.${name}`,
        `${JSON.stringify(value)} ${problem} (with no topic, the default topic is <aggregateType>.<type>)`,
        fix,
      );
    }
  }
  const bytes = Buffer.byteLength(aggregateType) + 1 + Buffer.byteLength(type);
  if (bytes > MAX_NAME_BYTES) {
    throw new OutboxValidationError(
      `${field}.topic`,
      `is missing, and the default topic <aggregateType>.<type> would be ${bytes} bytes long`,
      `Pass a topic of at most ${MAX_NAME_BYTES} bytes, or shorten aggregateType and type.`,
    );
  }
}
