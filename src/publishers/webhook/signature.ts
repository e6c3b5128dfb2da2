/**
 * Signing and checking webhook requests.
 *
 * Standard Webhooks signs `${webhook-id}.${webhook-timestamp}.${body}`: in binary mode
 * the body is only the payload, and the envelope a receiver dedups, routes and orders on
 * travels in `ce-*` headers the signature does not cover. So every request also carries
 *
 * - `txo-signed-headers`: the names of the headers that carry the event (the `ce-*`
 *   attributes, `content-type`, the event's own headers such as `traceparent`), and
 * - `txo-signature`: `v1,` + base64 HMAC-SHA256, keyed with a key derived from the same
 *   secret, of `${webhook-id}.${webhook-timestamp}.` followed by `name:value\n` for each
 *   of those headers in that order (values as sent, surrounding whitespace trimmed:
 *   the `ce-*` values percent-encoded, so a signed value is exactly what the receiver
 *   decodes, and an edge space of an attribute is `%20`, never trimmed);
 *
 * and in binary mode `webhook-id` equals `ce-id`. {@link verifyWebhookEvent} checks all
 * of it and returns only the signed headers, so a receiver acts on nothing unsigned. The
 * derived key (HMAC-SHA256 of {@link ATTRIBUTES_KEY_LABEL} under the secret) keeps the two
 * signatures apart: neither can be passed off as the other. Plain Standard Webhooks
 * verifiers (the `standardwebhooks` package …) still verify the body signature and ignore
 * the `txo-*` headers.
 */

import { createHmac, timingSafeEqual } from 'node:crypto';
import { OutboxValidationError } from '../../errors.js';

/**
 * A Standard Webhooks signing secret: `whsec_` followed by base64 (the key is
 * the decoded bytes), or any other non-empty string (its UTF-8 bytes are the
 * key), or the raw key bytes.
 */
export type WebhookSecret = string | Uint8Array;

/** The signed content and key of one webhook request, see {@link signWebhook}. */
export interface SignWebhookInput {
  readonly secret: WebhookSecret;
  /** The `webhook-id` header value. */
  readonly id: string;
  /** The `webhook-timestamp` header value, in unix seconds. */
  readonly timestamp: number;
  /** The exact request body. */
  readonly body: Uint8Array | string;
}

/** A received request to check, see {@link verifyWebhook}. */
export interface VerifyWebhookInput {
  readonly secret: WebhookSecret;
  /** Request headers: a fetch `Headers`, or a record such as node's `req.headers` (names are case-insensitive). */
  readonly headers: Headers | Readonly<Record<string, string | readonly string[] | undefined>>;
  /** The raw request body, exactly as received (do not re-serialize parsed JSON). */
  readonly body: Uint8Array | string;
  /** Maximum distance between `webhook-timestamp` and `now`, in seconds. Default 300. */
  readonly toleranceSeconds?: number;
  /** The receiver's clock. Default: the current time. */
  readonly now?: Date;
}

/** The verdict of {@link verifyWebhookEvent}. */
export type WebhookVerification =
  | {
      readonly ok: true;
      /** The `webhook-id`. */
      readonly id: string;
      /**
       * The signed headers only (lower-case names, values as received, so the `ce-*` ones still
       * percent-encoded: `fromEnvelope` decodes them): all a receiver may act on.
       */
      readonly headers: Readonly<Record<string, string>>;
    }
  | { readonly ok: false; readonly reason: string };

/** Header listing the names of the signed headers. */
export const SIGNED_HEADERS_HEADER = 'txo-signed-headers';
/** Header carrying the signature of the headers named in {@link SIGNED_HEADERS_HEADER}. */
export const HEADERS_SIGNATURE_HEADER = 'txo-signature';
/** What the headers-signature key is derived from: HMAC-SHA256(secret key, this label). */
export const ATTRIBUTES_KEY_LABEL = 'tx-outbox webhook headers v1';

const DEFAULT_TOLERANCE_SECONDS = 300;
const SECRET_PREFIX = 'whsec_';
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/;
/** Never signed: the signature headers themselves, and hop-by-hop or framing headers. */
const UNSIGNABLE = new Set([
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
  SIGNED_HEADERS_HEADER,
  HEADERS_SIGNATURE_HEADER,
  'host',
  'connection',
  'content-length',
  'transfer-encoding',
]);

/**
 * Computes the Standard Webhooks signature of a request: `v1,` followed by
 * the base64 HMAC-SHA256 of `${id}.${timestamp}.${body}` keyed with the
 * decoded secret. This is the `webhook-signature` header value.
 *
 * @throws OutboxValidationError when the secret is missing or malformed.
 */
export function signWebhook(input: SignWebhookInput): string {
  return `v1,${hmac(decodeSecret(input.secret), input.id, String(input.timestamp), input.body).toString('base64')}`;
}

/**
 * Checks the Standard Webhooks part of a received webhook: `webhook-id`,
 * `webhook-timestamp` and `webhook-signature` must be present, the timestamp
 * must be within `toleranceSeconds` of `now` (either direction), and at least
 * one of the space-separated `v1,<base64>` signatures must match (compared in
 * constant time). Returns false for any unsigned, stale or tampered request.
 *
 * This authenticates the id, the timestamp and the body only. A receiver that
 * reads the `ce-*` headers (event id, type, aggregate, sequence …) must use
 * {@link verifyWebhookEvent}, which also checks those.
 *
 * @throws OutboxValidationError when the secret is missing or malformed (a receiver bug, not a bad request).
 */
export function verifyWebhook(input: VerifyWebhookInput): boolean {
  return checkBodySignature(decodeSecret(input.secret), input) === undefined;
}

/**
 * Checks a request from `webhookPublisher` completely: the Standard Webhooks
 * signature and timestamp ({@link verifyWebhook}), the signature over the
 * headers listed in `txo-signed-headers`, and that a signed `ce-id` equals
 * `webhook-id`. On success returns the signed headers only — act on nothing
 * else; on failure a reason fit for a log line (never a secret).
 *
 * @throws OutboxValidationError when the secret is missing or malformed (a receiver bug, not a bad request).
 */
export function verifyWebhookEvent(input: VerifyWebhookInput): WebhookVerification {
  const key = decodeSecret(input.secret);
  const readHeader = headerReader(input.headers);
  const bodyProblem = checkBodySignature(key, input, readHeader);
  if (bodyProblem !== undefined) return { ok: false, reason: bodyProblem };
  const id = readHeader('webhook-id')!;
  const timestamp = readHeader('webhook-timestamp')!;
  const list = readHeader(SIGNED_HEADERS_HEADER);
  const signatures = readHeader(HEADERS_SIGNATURE_HEADER);
  if (list === undefined || signatures === undefined) {
    return {
      ok: false,
      reason: `no ${SIGNED_HEADERS_HEADER}/${HEADERS_SIGNATURE_HEADER}: the headers are unsigned`,
    };
  }
  const names = parseSignedHeaderNames(list);
  if (typeof names === 'string') return { ok: false, reason: names };
  const headers: Record<string, string> = {};
  for (const name of names) {
    const value = readHeader(name);
    if (value === undefined) return { ok: false, reason: `signed header ${name} is missing` };
    headers[name] = value.trim();
  }
  const expected = headersHmac(key, id, timestamp, Object.entries(headers));
  if (!anySignatureMatches(signatures, expected)) {
    return { ok: false, reason: `${HEADERS_SIGNATURE_HEADER} does not match the headers` };
  }
  const eventId = headers['ce-id'];
  if (eventId !== undefined && eventId !== id) {
    return { ok: false, reason: 'ce-id differs from webhook-id' };
  }
  return { ok: true, id, headers };
}

/** A request to sign as `webhookPublisher` does, see {@link signWebhookRequest}. */
export interface SignWebhookRequestInput {
  readonly secret: WebhookSecret;
  /** The `webhook-id`; equal to the `ce-id` header when there is one. */
  readonly id: string;
  /** The exact request body. */
  readonly body: Uint8Array | string;
  /** The headers that carry the event (`ce-*`, `content-type` …): all of them are signed. */
  readonly headers: Headers | Readonly<Record<string, string>>;
  /** Signing time, ms since the epoch. Default: now. */
  readonly now?: number;
}

/**
 * The `webhook-id`, `webhook-timestamp`, `webhook-signature`, `txo-signed-headers`
 * and `txo-signature` headers that sign a request as `webhookPublisher` does,
 * for a sender of your own or a test of a receiver. Send them with `headers`.
 *
 * @throws OutboxValidationError when the secret is missing or malformed.
 */
export function signWebhookRequest(input: SignWebhookRequestInput): Record<string, string> {
  const body = typeof input.body === 'string' ? Buffer.from(input.body, 'utf8') : input.body;
  return signatureHeaders(decodeSecret(input.secret), input.id, body, new Headers(input.headers), input.now);
}

/**
 * The `webhook-*` and `txo-*` headers of one request, signing its id, body and
 * the given event headers (see the module comment).
 *
 * @internal The webhook publisher's signer; the key is the decoded secret.
 */
export function signatureHeaders(
  key: Buffer,
  id: string,
  body: Uint8Array,
  eventHeaders: Headers,
  now: number = Date.now(),
): Record<string, string> {
  const timestamp = String(Math.floor(now / 1000));
  const signed: Array<[string, string]> = [];
  for (const [name, value] of eventHeaders) {
    if (!UNSIGNABLE.has(name)) signed.push([name, value.trim()]);
  }
  return {
    'webhook-id': id,
    'webhook-timestamp': timestamp,
    'webhook-signature': `v1,${hmac(key, id, timestamp, body).toString('base64')}`,
    [SIGNED_HEADERS_HEADER]: signed.map(([name]) => name).join(' '),
    [HEADERS_SIGNATURE_HEADER]: `v1,${headersHmac(key, id, timestamp, signed).toString('base64')}`,
  };
}

function checkBodySignature(
  key: Buffer,
  input: VerifyWebhookInput,
  readHeader: HeaderReader = headerReader(input.headers),
): string | undefined {
  const id = readHeader('webhook-id');
  const timestamp = readHeader('webhook-timestamp');
  const signatures = readHeader('webhook-signature');
  if (id === undefined || timestamp === undefined || signatures === undefined) {
    return 'no webhook-id, webhook-timestamp or webhook-signature';
  }
  if (!isTimestampFresh(timestamp, input.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS, input.now)) {
    return 'webhook-timestamp is malformed or outside the tolerance';
  }
  return anySignatureMatches(signatures, hmac(key, id, timestamp, input.body))
    ? undefined
    : 'webhook-signature does not match';
}

function parseSignedHeaderNames(list: string): string[] | string {
  const names = list.trim().split(/\s+/);
  const seen = new Set<string>();
  for (const name of names) {
    if (!HEADER_NAME.test(name) || UNSIGNABLE.has(name) || seen.has(name)) {
      return `${SIGNED_HEADERS_HEADER} is malformed`;
    }
    seen.add(name);
  }
  return names;
}

function hmac(key: Buffer, id: string, timestamp: string, body: Uint8Array | string): Buffer {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest();
}

function headersHmac(
  key: Buffer,
  id: string,
  timestamp: string,
  headers: ReadonlyArray<readonly [string, string]>,
): Buffer {
  const derived = createHmac('sha256', key).update(ATTRIBUTES_KEY_LABEL).digest();
  const mac = createHmac('sha256', derived).update(`${id}.${timestamp}.`);
  for (const [name, value] of headers) mac.update(`${name}:${value}\n`, 'latin1');
  return mac.digest();
}

function isTimestampFresh(timestamp: string, toleranceSeconds: number, now: Date | undefined): boolean {
  if (!/^\d{1,15}$/.test(timestamp)) return false;
  const nowSeconds = Math.floor((now ?? new Date()).getTime() / 1000);
  return Math.abs(nowSeconds - Number(timestamp)) <= toleranceSeconds;
}

function anySignatureMatches(signatures: string, expected: Buffer): boolean {
  let matched = false;
  // Every candidate is compared, so the time taken does not say which one matched.
  for (const candidate of signatures.split(' ')) {
    if (signatureMatches(candidate, expected)) matched = true;
  }
  return matched;
}

function signatureMatches(candidate: string, expected: Buffer): boolean {
  if (!candidate.startsWith('v1,')) return false;
  const actual = Buffer.from(candidate.slice(3), 'base64');
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

type HeaderReader = (name: string) => string | undefined;

/**
 * A lookup of lower-case header names, indexed once: a request may list every one of its
 * headers (up to node's limit of 2000) in txo-signed-headers, and a scan of all of them
 * per listed name would make it cost the event loop hundreds of milliseconds.
 */
function headerReader(headers: VerifyWebhookInput['headers']): HeaderReader {
  if (headers instanceof Headers) return (name) => headers.get(name) ?? undefined;
  const byName = new Map<string, string>();
  for (const [key, value] of Object.entries(headers)) {
    const name = key.toLowerCase();
    // The first of two spellings wins, as a scan in order would.
    if (value === undefined || byName.has(name)) continue;
    byName.set(name, typeof value === 'string' ? value : value.join(' '));
  }
  return (name) => byName.get(name);
}

/**
 * The HMAC key of a secret.
 *
 * @throws OutboxValidationError when the secret is missing or malformed.
 */
export function decodeSecret(secret: unknown): Buffer {
  const fix =
    "Pass the receiver's signing secret, e.g. `secret: process.env.WEBHOOK_SECRET` " +
    '("whsec_" + base64, or a raw string / Buffer)';
  if (secret instanceof Uint8Array) {
    if (secret.length === 0) throw new OutboxValidationError('secret', 'is an empty buffer', fix);
    return Buffer.from(secret);
  }
  if (typeof secret !== 'string') throw new OutboxValidationError('secret', 'is missing', fix);
  if (!secret.startsWith(SECRET_PREFIX)) {
    if (secret.length === 0) throw new OutboxValidationError('secret', 'is an empty string', fix);
    return Buffer.from(secret, 'utf8');
  }
  const encoded = secret.slice(SECRET_PREFIX.length);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) {
    throw new OutboxValidationError('secret', 'starts with "whsec_" but the rest is not base64', fix);
  }
  return Buffer.from(encoded, 'base64');
}
