/**
 * The rules for an event's own headers. They travel next to the CloudEvents envelope as NATS
 * and HTTP headers, Kafka record headers, AMQP header table entries, Redis stream fields and
 * MQTT user properties, so a name and value are accepted only when every one of those carries
 * them unchanged, and a name only when no transport (or the envelope) gives it a meaning.
 */
import { HEADERS_ATTRIBUTE } from '../envelope/attributes.js';
import { OutboxValidationError } from '../errors.js';
import { EDGE_WHITESPACE, uncarriedProblem } from './text.js';

/**
 * One event's headers together, in bytes, each counted as {@link headerCost}. Node (and most HTTP
 * servers) refuse a request head over 16 KiB with 431; the webhook request of the largest event
 * stays under that: these 8 KiB, the eleven `ce-*` attributes (five of them up to 255 bytes,
 * three times that percent-encoded: 3.8 KiB), the trace context `enqueue` adds (`traceparent`,
 * and a `tracestate` OpenTelemetry keeps to 512 characters) and the Standard Webhooks and
 * `txo-*` headers.
 */
export const MAX_HEADERS_BYTES = 8192;

/**
 * What a header takes of {@link MAX_HEADERS_BYTES}: its name twice (the webhook request lists
 * every signed name again in `txo-signed-headers`, each followed by a space), its value, and the
 * `: ` and CRLF of the header line, so that what `enqueue` accepts always fits a request head.
 */
export function headerCost(name: string, value: string): number {
  return 2 * name.length + value.length + 5;
}

/** RFC 9110 token characters (`tchar`): what an HTTP field name may hold. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Printable ASCII: what HTTP carries as is (non-ASCII goes as Latin-1 or not at all). */
const PRINTABLE = /^[\x20-\x7e]*$/;

const RENAME = 'Rename it, e.g. with an x- prefix.';
const CLOUDEVENTS =
  'is a CloudEvents attribute of the envelope (structured mode and MQTT carry headers next to them)';
const HTTP_CONNECTION = 'is an HTTP connection header, which the webhook publisher cannot send for an event';
const CLOUDEVENTS_03 =
  "is a CloudEvents 0.3 attribute: as an attribute of a 1.0 event (MQTT 5, structured mode) the cloudevents SDK's toEvent throws (schemaurl) or decodes the data as base64 (datacontentencoding)";
const SDK_METHOD =
  "is a method of the cloudevents SDK's CloudEvent (or of every JavaScript object): an attribute of that name (an MQTT 5 user property; in structured mode a lower-case one) replaces it, and the SDK throws (HTTP.toEvent of a batch for validate, HTTP.binary, String(event) …)";

/** Lower-case names a transport or the envelope gives a meaning, and why. */
const RESERVED: ReadonlyMap<string, string> = new Map([
  ...[
    'id',
    'source',
    'specversion',
    'type',
    'datacontenttype',
    'dataschema',
    'subject',
    'time',
    'data',
    'data_base64',
    'aggregatetype',
    'aggregateid',
    'sequence',
    'aggregatesequence',
    'sequencebase',
    'schemaversion',
  ].map((name) => [name, CLOUDEVENTS] as const),
  ...['schemaurl', 'datacontentencoding'].map((name) => [name, CLOUDEVENTS_03] as const),
  [HEADERS_ATTRIBUTE, "is tx-outbox's own CloudEvents extension (the event's headers in structured mode)"],
  ...[
    'validate',
    'emit',
    'clonewith',
    'tojson',
    'tostring',
    'tolocalestring',
    'valueof',
    'constructor',
    'hasownproperty',
    'isprototypeof',
    'propertyisenumerable',
    '__definegetter__',
    '__definesetter__',
    '__lookupgetter__',
    '__lookupsetter__',
  ].map((name) => [name, SDK_METHOD] as const),
  ...[
    'connection',
    'content-length',
    'expect',
    'host',
    'keep-alive',
    'proxy-connection',
    'te',
    'trailer',
    'transfer-encoding',
    'upgrade',
  ].map((name) => [name, HTTP_CONNECTION] as const),
  ['content-type', 'is set from the payload (application/json, or application/octet-stream for bytes)'],
  ...['webhook-id', 'webhook-timestamp', 'webhook-signature'].map(
    (name) => [name, 'is a Standard Webhooks header, which the webhook publisher sets'] as const,
  ),
  ...['cc', 'bcc'].map(
    (name) =>
      [name, 'is read by RabbitMQ as extra routing keys, and a string there closes the channel'] as const,
  ),
  ['payload', 'is the Redis stream field that holds the payload'],
  ...['authorization', 'proxy-authorization'].map(
    (name) =>
      [
        name,
        "is an HTTP credential, which would override the webhook endpoint's own; a secret has no place in an event row",
      ] as const,
  ),
  ['__proto__', 'is not an ordinary property name in JavaScript'],
]);

const RESERVED_PREFIXES: ReadonlyArray<readonly [string, string]> = [
  ['ce-', "starts with 'ce-', the CloudEvents envelope's prefix"],
  ['ce_', "starts with 'ce_', the CloudEvents prefix of Kafka headers"],
  ['cloudevents_', "starts with 'cloudEvents_', the CloudEvents prefix of AMQP headers"],
  ['txo-', "starts with 'txo-', tx-outbox's own headers (the webhook publisher's txo-signature …)"],
  [
    'nats-',
    "starts with 'Nats-': NATS JetStream acts on such headers (Nats-Msg-Id, Nats-Expected-*, Nats-Rollup …)",
  ],
];

/**
 * The reserved names and prefixes (lower case), for the table's own check of hand-written rows
 * (013_event_checks.sql), which must list the same.
 */
export const RESERVED_HEADER_NAMES: readonly string[] = [...RESERVED.keys()];
export const RESERVED_HEADER_PREFIXES: readonly string[] = RESERVED_PREFIXES.map(([prefix]) => prefix);

function reservedProblem(lower: string): string | undefined {
  const reason = RESERVED.get(lower);
  if (reason !== undefined) return reason;
  for (const [prefix, why] of RESERVED_PREFIXES) if (lower.startsWith(prefix)) return why;
  return undefined;
}

function nameProblem(name: string): string | undefined {
  if (name.length === 0) return 'is an empty header name';
  if (name.length > 255) return `is a header name of ${name.length} characters`;
  if (!TOKEN.test(name)) {
    const index = name.search(/[^!#$%&'*+\-.^_`|~0-9A-Za-z]/);
    const code = name.codePointAt(index)!.toString(16).toUpperCase().padStart(4, '0');
    return `is not a valid header name: U+${code} at index ${index} is not an HTTP token character`;
  }
  return reservedProblem(name.toLowerCase());
}

/** Why a header value cannot travel unchanged everywhere; the value itself is never quoted (it may be a secret). */
function valueProblem(value: string): string | undefined {
  if (PRINTABLE.test(value)) {
    return EDGE_WHITESPACE.test(value) ? 'starts or ends with a space, which NATS and HTTP strip' : undefined;
  }
  const uncarried = uncarriedProblem(value);
  if (uncarried !== undefined) return uncarried;
  const index = value.search(/[^\x20-\x7e]/);
  const code = value.codePointAt(index)!.toString(16).toUpperCase().padStart(4, '0');
  return `contains U+${code} at index ${index}, a non-ASCII character, which HTTP headers cannot carry`;
}

function headerField(field: string, name: string): string {
  return `${field}[${JSON.stringify(name)}]`;
}

/** Header names already found valid, with their lower case: events repeat a few names. */
const validNames = new Map<string, string>();

/** The lower case of a valid header name; throws naming the header otherwise. */
function checkedName(name: string, field: string): string {
  const known = validNames.get(name);
  if (known !== undefined) return known;
  const problem = nameProblem(name);
  if (problem !== undefined) {
    throw new OutboxValidationError(
      headerField(field, name),
      problem,
      problem.includes('token') ? 'Use letters, digits and - _ . only.' : RENAME,
    );
  }
  const lower = name.toLowerCase();
  if (validNames.size >= 1024) validNames.clear();
  validNames.set(name, lower);
  return lower;
}

/**
 * Validates an event's headers and merges the trace-context headers under them (an event's own
 * `traceparent`, in any case, wins). Returns the headers as the JSON the statement takes.
 */
export function headersJsonOf(
  value: unknown,
  field: string,
  traceHeaders: Readonly<Record<string, string>>,
  /** The CDC relay re-checks decoded headers, trace headers included: it allows for them. */
  maxBytes = MAX_HEADERS_BYTES,
): string {
  if (value === undefined || value === null) return JSON.stringify(traceHeaders);
  const fix = 'Pass a plain { name: value } object of strings.';
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new OutboxValidationError(
      field,
      `is ${Array.isArray(value) ? 'an array' : `a ${typeof value}`}`,
      fix,
    );
  }
  const proto = Object.getPrototypeOf(value) as object | null;
  if (proto !== Object.prototype && proto !== null) {
    const kind = (proto as { constructor?: { name?: unknown } }).constructor?.name;
    throw new OutboxValidationError(
      field,
      `is a ${typeof kind === 'string' ? kind : 'class instance'}, whose entries would be lost`,
      `${fix} For a Map: Object.fromEntries(map).`,
    );
  }
  const names = Object.keys(value);
  const own: Record<string, string> = {};
  const lowers: string[] = [];
  let bytes = 0;
  for (const name of names) {
    const lower = checkedName(name, field);
    const twin = names.length > 1 ? lowers.indexOf(lower) : -1;
    if (twin !== -1) {
      throw new OutboxValidationError(
        headerField(field, name),
        `repeats the header ${JSON.stringify(names[twin])} (names are case-insensitive in HTTP, which would join the values)`,
        'Keep one of them.',
      );
    }
    lowers.push(lower);
    const v = (value as Record<string, unknown>)[name];
    if (typeof v !== 'string') {
      throw new OutboxValidationError(
        headerField(field, name),
        `is a ${v === null ? 'null' : typeof v}`,
        'Header values are strings.',
      );
    }
    const badValue = valueProblem(v);
    if (badValue !== undefined) {
      throw new OutboxValidationError(
        headerField(field, name),
        badValue,
        'Pass printable ASCII: percent-encode other text (encodeURIComponent), or put it in the payload.',
      );
    }
    bytes += headerCost(name, v);
    if (bytes > maxBytes) {
      throw new OutboxValidationError(
        field,
        `take more than ${maxBytes} bytes, counting each header as 2 × name + value + 5 ` +
          '(the webhook request lists every name again in txo-signed-headers, and adds ": " and CRLF ' +
          'to each header line; Node refuses a request head over 16 KiB)',
        'Put large data in the payload, or use fewer or shorter header names.',
      );
    }
    own[name] = v;
  }
  let merged: Record<string, string> | undefined;
  for (const name in traceHeaders) {
    if (lowers.includes(name.toLowerCase())) continue;
    merged ??= {};
    merged[name] = traceHeaders[name]!;
  }
  return JSON.stringify(merged === undefined ? own : Object.assign(merged, own));
}
