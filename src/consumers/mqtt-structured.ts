/**
 * The CloudEvents structured content mode on MQTT (MQTT binding §3.2): the event as a JSON
 * event format document in the payload. MQTT 3.1.1 carries nothing else (what `mqttPublisher`
 * sends with `protocolVersion: 4`, now and in 0.1); MQTT 5 says so with the Content Type
 * `application/cloudevents+json`. Read into what `fromEnvelope` reads: every attribute under
 * its own name, and the data's bytes — the JSON `data` value's text exactly as the producer
 * wrote it (the whitespace around it belongs to the document), so what `mqttPublisher` embeds
 * comes back byte for byte.
 */
import { ATTRIBUTE_NAME } from '../envelope/attributes.js';
import { repeatedHeader, structuredHeaders } from '../envelope/read.js';

/** The JSON event format's media type (binding §3.2.1). */
const STRUCTURED = 'application/cloudevents+json';

/** Structured mode: said by the Content Type, or implied when a PUBLISH has no properties at all (MQTT 3.1.1, §3). */
export function isStructured(contentType: string | undefined, hasUserProperties: boolean): boolean {
  if (contentType !== undefined) return contentType.toLowerCase().startsWith(STRUCTURED);
  return !hasUserProperties;
}

/** A structured-mode event as headers (attributes by name) and payload bytes. */
export interface StructuredEvent {
  readonly headers: Record<string, string>;
  readonly payload: Uint8Array;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The event in `payload`; throws when it is not a JSON object (the error says why). */
export function readStructured(payload: Uint8Array): StructuredEvent {
  let text: string;
  let event: unknown;
  try {
    text = utf8.decode(payload);
    event = JSON.parse(text);
  } catch (error) {
    throw new Error(`the payload is not a CloudEvents JSON event: ${(error as Error).message}`);
  }
  if (typeof event !== 'object' || event === null || Array.isArray(event)) {
    throw new Error('the payload is not a CloudEvents JSON event: not a JSON object');
  }
  const members = event as Record<string, unknown>;
  const spans = memberSpans(text);
  const seen = new Set<string>();
  for (const { key } of spans) {
    // JSON.parse keeps the last of two members of one name: an attribute twice is ambiguous.
    if (seen.has(key) && key !== 'data' && ATTRIBUTE_NAME.test(key)) throw repeatedHeader(key, 'event');
    seen.add(key);
  }
  const headers = structuredHeaders(members);
  return { headers, payload: dataOf(text, members, spans) };
}

/** `data_base64` decoded; `data` as written (JSON), or a string's UTF-8 (any other content type); else nothing. */
function dataOf(text: string, members: Record<string, unknown>, spans: readonly MemberSpan[]): Uint8Array {
  if (typeof members['data_base64'] === 'string') return Buffer.from(members['data_base64'], 'base64');
  if (!('data' in members)) return new Uint8Array(0);
  const contentType = members['datacontenttype'];
  const json = typeof contentType !== 'string' || /^[^;]*(?:\/json|\+json)\s*(?:;|$)/i.test(contentType);
  const data = members['data'];
  if (!json) return Buffer.from(typeof data === 'string' ? data : JSON.stringify(data), 'utf8');
  // The last `data` member, as JSON.parse takes it.
  const { start, end } = spans.findLast((span) => span.key === 'data')!;
  return Buffer.from(text.slice(start, end), 'utf8');
}

const WHITESPACE = new Set([' ', '\t', '\n', '\r']);

function skipWhitespace(text: string, i: number): number {
  while (WHITESPACE.has(text[i]!)) i += 1;
  return i;
}

/** The index after the string that starts at `i`. */
function stringEnd(text: string, i: number): number {
  for (let j = i + 1; j < text.length; j += 1) {
    const code = text.charCodeAt(j);
    if (code === 0x5c) j += 1;
    else if (code === 0x22) return j + 1;
  }
  return text.length;
}

/** The index after the JSON value that starts at `i`. */
function valueEnd(text: string, i: number): number {
  const first = text[i];
  if (first === '"') return stringEnd(text, i);
  if (first === '{' || first === '[') {
    let depth = 0;
    for (let j = i; j < text.length; j += 1) {
      const char = text[j];
      if (char === '"') j = stringEnd(text, j) - 1;
      else if (char === '{' || char === '[') depth += 1;
      else if (char === '}' || char === ']') {
        depth -= 1;
        if (depth === 0) return j + 1;
      }
    }
    return text.length;
  }
  let j = i;
  while (j < text.length && !WHITESPACE.has(text[j]!) && text[j] !== ',' && text[j] !== '}') j += 1;
  return j;
}

/** A top-level member of a JSON object: its name, and where its value is in the text. */
interface MemberSpan {
  readonly key: string;
  readonly start: number;
  readonly end: number;
}

/** The top-level members of `text`, a JSON object already parsed, in order (a name may repeat). */
function memberSpans(text: string): MemberSpan[] {
  const spans: MemberSpan[] = [];
  let i = skipWhitespace(text, skipWhitespace(text, 0) + 1);
  while (text[i] === '"') {
    const keyEnd = stringEnd(text, i);
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    const start = skipWhitespace(text, skipWhitespace(text, keyEnd) + 1);
    const end = valueEnd(text, start);
    spans.push({ key, start, end });
    i = skipWhitespace(text, end);
    if (text[i] !== ',') break;
    i = skipWhitespace(text, i + 1);
  }
  return spans;
}
