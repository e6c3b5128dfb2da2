/** MQTT topic and string rules: what a broker refuses (or drops the connection over) before anything is sent. */
import { routedType } from '../../skip-marker.js';
import type { OutboxMessage } from '../contract.js';

/** The longest UTF-8 string (topic, user property name or value) MQTT can carry, in bytes. */
export const MAX_STRING_BYTES = 65_535;

/**
 * The `destination` option's default: `message.topic`, else `${aggregateType}/${type}` with
 * dots turned into slashes (`order` + `order.created` → `order/order/created`). A skip marker
 * (`dead skip`) goes where the event it stands for would have gone.
 */
export function defaultTopic(message: OutboxMessage): string {
  return message.topic !== null && message.topic !== ''
    ? message.topic
    : `${message.aggregateType}/${routedType(message)}`.replaceAll('.', '/');
}

/**
 * Characters MQTT strings must not (NUL, lone surrogates) or should not (control characters,
 * noncharacters) contain; Mosquitto drops the connection on any of them.
 */
const BAD_CHARACTER = /[\p{Cc}\p{Cs}\p{Noncharacter_Code_Point}]/u;

/** Why `value` cannot be an MQTT UTF-8 string, or undefined when it can. */
export function stringProblem(value: string): string | undefined {
  if (BAD_CHARACTER.test(value)) {
    if (value.includes('\u0000')) return 'contains a NUL character';
    if (/\p{Cs}/u.test(value)) return 'is not well-formed Unicode (a lone surrogate)';
    if (/\p{Cc}/u.test(value)) return 'contains a control character (U+0001–U+001F, U+007F–U+009F)';
    return 'contains a Unicode noncharacter (e.g. U+FFFF)';
  }
  // UTF-8 takes at most 3 bytes per UTF-16 code unit.
  if (value.length * 3 > MAX_STRING_BYTES) {
    const bytes = Buffer.byteLength(value);
    if (bytes > MAX_STRING_BYTES) return `is ${bytes} bytes long in UTF-8; MQTT allows ${MAX_STRING_BYTES}`;
  }
  return undefined;
}

/** Topics already found fine: a relay publishes on few topics, over and over. */
const validTopics = new Set<string>();

/** Why an MQTT broker would refuse (or drop the connection over) a PUBLISH to `topic`, or undefined. */
export function topicProblem(topic: string): string | undefined {
  if (validTopics.has(topic)) return undefined;
  let problem: string | undefined;
  if (topic.length === 0) problem = 'is empty';
  else if (topic.includes('+') || topic.includes('#')) {
    problem = 'contains a wildcard (+ or #), which only subscriptions may use';
  } else problem = stringProblem(topic);
  if (problem === undefined) {
    if (validTopics.size >= 4096) validTopics.clear();
    validTopics.add(topic);
  }
  return problem;
}

/** A topic for error messages: quoted and escaped, and cut when long. */
export function show(topic: string): string {
  return JSON.stringify(topic.length > 200 ? `${topic.slice(0, 200)}…` : topic);
}
