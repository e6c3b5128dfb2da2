/**
 * The webhook publisher's options, resolved once into a frozen {@link ResolvedWebhookOptions}:
 * old spellings moved to the vocabulary's names (`concurrency` → `maxInFlight`), then each
 * option checked (errors name the field and the fix), then the defaults filled in.
 */

import { ceSourceOption } from '../../envelope/ce-source.js';
import { OutboxValidationError } from '../../errors.js';
import { renamedOptions } from '../../options/renamed.js';
import { type EndpointResolver, endpointResolver, type WebhookEndpoints } from './endpoints.js';
import { decodeSecret, type WebhookSecret } from './signature.js';

export interface WebhookPublisherOptions {
  /**
   * Target URL(s), see {@link WebhookEndpoints}. Only http: and https: URLs are accepted; a
   * user name and password in one are sent as `Authorization: Basic`.
   */
  readonly endpoints: WebhookEndpoints;
  /** Signing secret shared with the receivers, see {@link WebhookSecret}. */
  readonly secret: WebhookSecret;
  /** Deadline per request, from sending to the end of the response body. Default 10 000 ms. */
  readonly timeoutMs?: number;
  /** Maximum requests in flight across all `publish` calls of this publisher. Default 64. */
  readonly maxInFlight?: number;
  /** @deprecated Use `maxInFlight`. */
  readonly concurrency?: number;
  /**
   * Batch mode: messages bound for the same URL are POSTed together (at most
   * `maxSize` per request) as a CloudEvents JSON batch. The request's outcome
   * applies to every message in it.
   */
  readonly batch?: { readonly maxSize: number };
  /** Extra static headers on every request (e.g. an API key). Protocol headers take precedence. */
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * CloudEvents `source` attribute: a URI-reference such as `https://orders.example.com`,
   * `urn:example:orders` or `/orders`. Default `'tx-outbox'`.
   */
  readonly ceSource?: string;
  /** @deprecated Use `ceSource`. */
  readonly source?: string;
}

/** The options as the publisher uses them: checked, defaults filled in, frozen. */
export interface ResolvedWebhookOptions {
  readonly resolve: EndpointResolver;
  readonly key: Buffer;
  readonly timeoutMs: number;
  readonly maxInFlight: number;
  /** Messages per POST in batch mode; undefined in single mode (one POST per message). */
  readonly batchSize: number | undefined;
  readonly headers: Readonly<Record<string, string>>;
  readonly source: string;
}

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_IN_FLIGHT = 64;

/** The component name in deprecation warnings. */
const COMPONENT = 'webhookPublisher';

/** Old spellings of the options (see src/options/renamed.ts). */
const RENAMES = { concurrency: 'maxInFlight', source: 'ceSource' } as const;

/** @throws OutboxValidationError when an option is invalid (names the option and the fix). */
export function resolveWebhookOptions(given: WebhookPublisherOptions): ResolvedWebhookOptions {
  if (typeof given !== 'object' || given === null) {
    throw new OutboxValidationError('options', 'is missing', 'Call webhookPublisher({ endpoints, secret })');
  }
  const options = renamedOptions(COMPONENT, given, RENAMES);
  const headers = staticHeaders(options.headers);
  return Object.freeze({
    resolve: endpointResolver(options.endpoints, headers),
    key: decodeSecret(options.secret),
    timeoutMs: positiveNumber('timeoutMs', options.timeoutMs, DEFAULT_TIMEOUT_MS),
    maxInFlight: positiveInteger('maxInFlight', options.maxInFlight, DEFAULT_MAX_IN_FLIGHT),
    batchSize: batchSize(options.batch),
    headers,
    source: ceSourceOption(given, options.ceSource),
  });
}

// The checks of src/options/checks.ts word their fix 'Fix the option' and accept any integer;
// these keep the webhook's own wording (the default named) and refuse unsafe integers.

function positiveNumber(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw new OutboxValidationError(
      field,
      `must be a positive number, got ${String(value)}`,
      omitForDefault(field, fallback),
    );
  }
  return value;
}

function positiveInteger(field: string, value: unknown, fallback: number | undefined): number {
  if (value === undefined && fallback !== undefined) return fallback;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) {
    const fix = fallback === undefined ? `Pass an integer >= 1` : omitForDefault(field, fallback);
    throw new OutboxValidationError(field, `must be a positive integer, got ${String(value)}`, fix);
  }
  return value;
}

function omitForDefault(field: string, fallback: number): string {
  return `Pass a value > 0, or omit \`${field}\` for the default (${fallback})`;
}

function batchSize(batch: WebhookPublisherOptions['batch']): number | undefined {
  if (batch === undefined) return undefined;
  if (typeof batch !== 'object' || batch === null) {
    throw new OutboxValidationError(
      'batch',
      'must be an object',
      'Pass `batch: { maxSize: 100 }`, or omit it',
    );
  }
  return positiveInteger('batch.maxSize', batch.maxSize, undefined);
}

function staticHeaders(headers: WebhookPublisherOptions['headers']): Readonly<Record<string, string>> {
  if (headers === undefined) return Object.freeze({});
  const fix = "Pass a record of header names to string values, e.g. `headers: { authorization: 'Bearer …' }`";
  if (typeof headers !== 'object' || headers === null) {
    throw new OutboxValidationError('headers', 'must be an object', fix);
  }
  const copy: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (typeof value !== 'string') {
      throw new OutboxValidationError(`headers.${name}`, `must be a string, got ${typeof value}`, fix);
    }
    try {
      new Headers([[name, value]]);
    } catch {
      throw new OutboxValidationError(`headers.${name}`, 'is not a valid HTTP header name or value', fix);
    }
    copy[name] = value;
  }
  return Object.freeze(copy);
}
