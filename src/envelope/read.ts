/**
 * Reading an envelope back, whatever wrote it: every binding tx-outbox writes (bindings.ts)
 * and what earlier versions wrote (`ce-*` names, values as they are, on every transport), so a
 * rolling upgrade with both on the wire reads the same. The form is told by the id's name:
 * `ce_id` Kafka, `cloudEvents_id` / `cloudEvents:id` AMQP, `ce-id` HTTP and NATS (their values
 * are percent-encoded when `ce-aggregatesequence` is present, which earlier versions never
 * sent), `id` MQTT 5, Redis and structured mode.
 *
 * A message that could mean two things is refused rather than read one way: two envelope
 * forms side by side (`ce-id` and `ce_id`, both AMQP separators), one attribute under two
 * names (`ce-aggregateid` and `CE-AggregateId`), a `ce-aggregatesequence` next to a `ce-sequence`
 * that is not zero-padded (neither 0.1's form nor the current one).
 */
import { OutboxValidationError } from '../errors.js';
import { ATTRIBUTE_NAME, HEADERS_ATTRIBUTE, KNOWN_ATTRIBUTES, SEQUENCE_DIGITS } from './attributes.js';
import { percentDecode } from './percent.js';

/** How a message's envelope was written. */
export type EnvelopeForm = 'ce-encoded' | 'ce' | 'kafka' | 'amqp' | 'unprefixed';

/** An envelope read from a message's headers. */
export interface ReadEnvelope {
  readonly form: EnvelopeForm;
  /** Every CloudEvents attribute found, by its name (`id`, `aggregateid` …), decoded. */
  readonly attributes: Readonly<Record<string, string>>;
  /** The header each attribute was read from, for errors. */
  readonly headerOf: Readonly<Record<string, string>>;
  /**
   * The form's prefix as the message spells it (`ce_`, `cloudEvents_`, `` for unprefixed …):
   * the header an absent attribute would have, for errors.
   */
  readonly prefix: string;
  /** The other headers, as they arrived (`traceparent`, the user's own, `content-type` …). */
  readonly headers: Readonly<Record<string, string>>;
}

/** Lower-case prefixes of the prefixed forms. */
const PREFIXES: ReadonlyArray<readonly [string, EnvelopeForm]> = [
  ['ce_', 'kafka'],
  ['cloudevents_', 'amqp'],
  ['cloudevents:', 'amqp'],
  ['ce-', 'ce'],
];

const NOT_OURS = 'The message was not published by tx-outbox, or was altered on the way.';

function refuse(name: string, problem: string): never {
  throw new OutboxValidationError(`headers.${name}`, problem, NOT_OURS);
}

/** `target[name] = value`, `__proto__` included (an assignment would set the prototype instead). */
function put(target: Record<string, string>, name: string, value: string): void {
  if (name === '__proto__')
    Object.defineProperty(target, name, { value, enumerable: true, writable: true, configurable: true });
  else target[name] = value;
}

/**
 * Whether a header named `name` can carry an envelope attribute in some form: a prefixed name
 * (`ce-`, `ce_`, `cloudEvents_`, `cloudEvents:`) or an unprefixed attribute name. A consumer
 * refuses a message that repeats such a header rather than keep one of the values.
 */
export function isEnvelopeName(name: string): boolean {
  const lower = name.toLowerCase();
  return prefixOf(lower) !== undefined || KNOWN_ATTRIBUTES.has(lower);
}

/**
 * The refusal of a message that carries a header able to hold an envelope attribute
 * ({@link isEnvelopeName}) more than once: keeping either value would read the message one way
 * of two (`order.placed` or `order.cancelled`). `unit` is what the transport calls a message
 * (`record`, `entry`, `message`, `request`). Every consumer adapter refuses with it.
 */
export function repeatedHeader(name: string, unit: string): OutboxValidationError {
  return new OutboxValidationError(`headers.${name}`, `appears twice in the ${unit}`, NOT_OURS);
}

/** The prefix of `lower`, or undefined. */
function prefixOf(lower: string): string | undefined {
  for (const [prefix] of PREFIXES) if (lower.startsWith(prefix)) return prefix;
  return undefined;
}

/**
 * The headers' own string entries (inherited properties and `undefined` left out); a value
 * that is not a string is refused.
 */
function entriesOf(headers: Readonly<Record<string, string | undefined>>): Array<readonly [string, string]> {
  const entries: Array<readonly [string, string]> = [];
  for (const name of Object.keys(headers)) {
    const value: unknown = headers[name];
    if (value === undefined) continue;
    if (typeof value !== 'string')
      refuse(name, `is a ${value === null ? 'null' : typeof value}, not a string`);
    entries.push([name, value]);
  }
  return entries;
}

interface Form {
  readonly form: EnvelopeForm;
  /** The lower-case prefix. */
  readonly prefix: string;
  /** The prefix as the message spells it. */
  readonly spelled: string;
}

/**
 * The envelope's form, told by the id's name; a message without an id by the prefix of its
 * first prefixed attribute (else unprefixed attributes, else the generic `ce-`), so that the
 * refusal names the id the message lacks rather than calling its attributes another form's.
 */
function formOf(entries: ReadonlyArray<readonly [string, string]>): Form {
  let found: (Form & { readonly name: string }) | undefined;
  let first: Form | undefined;
  let unprefixed = false;
  let aggregateSequence = false;
  for (const [name] of entries) {
    const lower = name.toLowerCase();
    if (lower === 'ce-aggregatesequence') aggregateSequence = true;
    if (KNOWN_ATTRIBUTES.has(lower)) unprefixed = true;
    for (const [prefix, form] of PREFIXES) {
      if (!lower.startsWith(prefix) || lower.length === prefix.length) continue;
      first ??= { form, prefix, spelled: name.slice(0, prefix.length) };
      if (lower !== `${prefix}id`) continue;
      if (found !== undefined && found.prefix !== prefix) {
        refuse(name, `is a second envelope's id beside ${found.name}: one message, one envelope form`);
      }
      found = { form, prefix, spelled: name.slice(0, prefix.length), name };
    }
  }
  // An unprefixed `id` is an id too (MQTT 5, Redis, structured mode).
  const chosen =
    found ??
    (entries.some(([name]) => name.toLowerCase() === 'id') ? undefined : first) ??
    (unprefixed
      ? { form: 'unprefixed', prefix: '', spelled: '' }
      : { form: 'ce', prefix: 'ce-', spelled: 'ce-' });
  if (chosen.form === 'ce' && aggregateSequence) return { ...chosen, form: 'ce-encoded' };
  return chosen;
}

/**
 * The attributes and other headers of a message's envelope. Throws an `OutboxValidationError`
 * naming the header whose value is not valid percent-encoding, or that makes the message
 * ambiguous.
 */
export function readEnvelope(headers: Readonly<Record<string, string | undefined>>): ReadEnvelope {
  const entries = entriesOf(headers);
  const { form, prefix, spelled } = formOf(entries);
  const attributes: Record<string, string> = {};
  const headerOf: Record<string, string> = {};
  const rest: Record<string, string> = {};
  for (const [name, value] of entries) {
    const lower = name.toLowerCase();
    let attribute: string | undefined;
    if (prefix === '') {
      if (KNOWN_ATTRIBUTES.has(lower)) attribute = lower;
    } else if (lower.startsWith(prefix)) {
      attribute = lower.slice(prefix.length);
    }
    if (attribute === undefined || attribute === '') {
      const other = prefixOf(lower);
      if (other !== undefined && other !== prefix) {
        refuse(
          name,
          `carries another envelope form's prefix (${other}) beside ${prefix || 'unprefixed'} attributes`,
        );
      }
      put(rest, name, value);
      continue;
    }
    const twin = headerOf[attribute];
    if (twin !== undefined) refuse(name, `repeats the attribute ${attribute} (also in ${twin})`);
    if (form === 'ce-encoded') {
      try {
        attributes[attribute] = percentDecode(value);
      } catch (error) {
        refuse(name, `is not valid percent-encoding: ${(error as Error).message}`);
      }
    } else {
      attributes[attribute] = value;
    }
    headerOf[attribute] = name;
  }
  const sequence = attributes['sequence'];
  if (form === 'ce-encoded' && sequence !== undefined && sequence.length !== SEQUENCE_DIGITS) {
    refuse(
      headerOf['sequence']!,
      `is not zero-padded to ${SEQUENCE_DIGITS} digits, though ce-aggregatesequence says the values are percent-encoded`,
    );
  }
  if (attributes['datacontenttype'] === undefined) {
    for (const name in rest) {
      if (name.toLowerCase() === 'content-type') {
        attributes['datacontenttype'] = rest[name]!;
        headerOf['datacontenttype'] = name;
        break;
      }
    }
  }
  if (form === 'unprefixed') unpackHeaders(rest);
  return { form, attributes, headerOf, prefix: spelled, headers: rest };
}

/**
 * A structured-mode event's `txoheaders` (structuredAttributes) back into the headers it
 * carries. Left as it is when it is not a JSON object of strings (another producer's).
 */
function unpackHeaders(headers: Record<string, string>): void {
  const packed = headers[HEADERS_ATTRIBUTE];
  if (packed === undefined) return;
  let parsed: unknown;
  try {
    parsed = JSON.parse(packed);
  } catch {
    return;
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return;
  const entries = Object.entries(parsed);
  if (!entries.every(([, value]) => typeof value === 'string')) return;
  delete headers[HEADERS_ATTRIBUTE];
  for (const [name, value] of entries) {
    // Only the producer's own headers: nothing an envelope reader would take for an attribute.
    if (isEnvelopeName(name) || name === HEADERS_ATTRIBUTE || Object.hasOwn(headers, name)) continue;
    put(headers, name, value as string);
  }
}

/**
 * The members of a structured-mode JSON event as the headers `readEnvelope` reads: attribute
 * names only (a `ce-id` or `AGGREGATEID` member is no attribute of a JSON event), `data` and
 * `data_base64` left to the caller, Integer and Boolean attributes (JSON numbers and booleans
 * in the event format) as their strings.
 */
export function structuredHeaders(members: Readonly<Record<string, unknown>>): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(members)) {
    if (name === 'data' || name === 'data_base64' || !ATTRIBUTE_NAME.test(name)) continue;
    if (typeof value === 'string') headers[name] = value;
    else if (typeof value === 'number' || typeof value === 'boolean') headers[name] = String(value);
  }
  return headers;
}
