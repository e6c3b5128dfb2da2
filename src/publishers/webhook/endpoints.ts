/**
 * Where the webhook publisher POSTs: the `endpoints` option resolved per message into an
 * {@link Endpoint}. An address's user name and password become an `Authorization: Basic`
 * header (fetch refuses URLs with credentials, and would echo them in its error), and no
 * secret of an address — password, user name, query values — reaches an error message:
 * each endpoint carries its `label` (the address with them masked) and a `scrub` for text
 * from elsewhere (a response body, a socket error) that might repeat them.
 */

import { OutboxValidationError, PublishError } from '../../errors.js';
import { redactText, redactUrl } from '../../redact.js';
import type { OutboxMessage } from '../contract.js';

/**
 * Where to POST an event: one URL for everything; a map from the message's
 * `topic` to a URL, where the key `'*'` is the fallback (also used for messages
 * whose topic is null); or a function choosing the URL per message.
 */
export type WebhookEndpoints =
  | string
  | Readonly<Record<string, string>>
  | ((message: OutboxMessage) => string);

/** One resolved destination. */
export interface Endpoint {
  /** The address requests go to, without user name and password. */
  readonly url: URL;
  /** `Basic …` from the address's user name and password; undefined when it had none. */
  readonly authorization: string | undefined;
  /** Requests with the same key go to the same place with the same credentials (batch grouping). */
  readonly key: string;
  /** The address as messages show it, secrets masked. */
  readonly label: string;
  /** Masks this address's secrets, and every URL's password and query values, in `text`. */
  scrub(text: string): string;
}

export type EndpointResolver = (message: OutboxMessage) => Endpoint | PublishError;

/** What of the `headers` option matters to an endpoint. */
interface StaticHeaders {
  /** The option sets `authorization`. */
  readonly authorization: boolean;
  /** Its values, masked wherever they turn up (a receiver's error page may quote them). */
  readonly secrets: readonly string[];
}

const FALLBACK_KEY = '*';
const MASK = '***';
/** Shorter query values are not searched for in free text: `?v=1` is no secret, and masking every `1` would garble it. */
const MIN_SCRUBBED_LENGTH = 4;

/**
 * Resolves the `endpoints` option.
 *
 * @param headers the `headers` option: an `authorization` there contradicts an address with
 *   credentials, and its values (API keys, tokens) are masked like the address's secrets
 * @throws OutboxValidationError when an address is invalid.
 */
export function endpointResolver(
  endpoints: unknown,
  headers: Readonly<Record<string, string>>,
): EndpointResolver {
  const statics: StaticHeaders = {
    authorization: Object.keys(headers).some((name) => name.toLowerCase() === 'authorization'),
    secrets: staticHeaderSecrets(headers),
  };
  if (typeof endpoints === 'string') {
    const endpoint = parseEndpoint('endpoints', endpoints, statics);
    return () => endpoint;
  }
  if (typeof endpoints === 'function') {
    return functionResolver(endpoints as (message: OutboxMessage) => unknown, statics);
  }
  if (typeof endpoints === 'object' && endpoints !== null) return recordResolver(endpoints, statics);
  throw new OutboxValidationError(
    'endpoints',
    'is missing',
    "Pass a URL, a record from topic to URL (key '*' = fallback), or a function (message) => URL",
  );
}

function recordResolver(endpoints: object, statics: StaticHeaders): EndpointResolver {
  const routes = new Map<string, Endpoint>();
  for (const [topic, value] of Object.entries(endpoints)) {
    routes.set(topic, parseEndpoint(`endpoints['${topic}']`, value, statics));
  }
  if (routes.size === 0) {
    throw new OutboxValidationError(
      'endpoints',
      'is an empty record',
      "Map at least one topic to a URL, or add a fallback: `endpoints: { '*': 'https://…' }`",
    );
  }
  return (message) => {
    const endpoint =
      (message.topic === null ? undefined : routes.get(message.topic)) ?? routes.get(FALLBACK_KEY);
    return endpoint ?? unroutable(message.topic);
  };
}

function unroutable(topic: string | null): PublishError {
  const what = topic === null ? 'a message without a topic' : `topic '${topic}'`;
  const fix = topic === null ? '' : `endpoints['${topic}'] or `;
  return new PublishError(
    `No webhook endpoint for ${what}: the \`endpoints\` option has no entry for it and no '*' fallback. ` +
      `Add ${fix}endpoints['*'].`,
    { retryable: false, code: 'TXO_WEBHOOK_NO_ENDPOINT' },
  );
}

function functionResolver(
  choose: (message: OutboxMessage) => unknown,
  statics: StaticHeaders,
): EndpointResolver {
  return (message) => {
    try {
      return parseEndpoint('endpoints', choose(message), statics);
    } catch (error) {
      const detail = redactText(error instanceof Error ? error.message : String(error));
      return new PublishError(`The \`endpoints\` function failed for event ${message.eventId}: ${detail}`, {
        retryable: false,
        code: 'TXO_WEBHOOK_NO_ENDPOINT',
        cause: error,
      });
    }
  };
}

function parseEndpoint(field: string, value: unknown, statics: StaticHeaders): Endpoint {
  const fix = "Pass an absolute http(s) URL such as 'https://example.com/webhooks'";
  if (typeof value !== 'string')
    throw new OutboxValidationError(field, `must be a URL string, got ${typeof value}`, fix);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new OutboxValidationError(field, `'${redactUrl(value)}' is not a valid URL`, fix);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new OutboxValidationError(
      field,
      `'${redactUrl(url)}' uses ${url.protocol} instead of http: or https:`,
      fix,
    );
  }
  const secrets = [...secretsOf(url), ...statics.secrets];
  let authorization: string | undefined;
  if (url.username !== '' || url.password !== '') {
    if (statics.authorization) {
      throw new OutboxValidationError(
        field,
        `'${redactUrl(url)}' has a user name or password, and the \`headers\` option sets authorization too`,
        'Give the credentials in one place: in the URL (sent as Basic authentication) or in `headers`',
      );
    }
    const credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
    authorization = `Basic ${Buffer.from(credentials, 'utf8').toString('base64')}`;
    secrets.push(authorization.slice('Basic '.length));
    url = new URL(url.href);
    url.username = '';
    url.password = '';
  }
  url.hash = '';
  // Longest first, so a secret containing another is masked whole.
  secrets.sort((a, b) => b.length - a.length);
  const label = redactUrl(url);
  return {
    url,
    authorization,
    key: `${authorization ?? ''} ${url.href}`,
    label,
    scrub: (text) => scrub(text, secrets),
  };
}

/** The strings of an address worth masking wherever they turn up: user name, password, query values. */
function secretsOf(url: URL): string[] {
  const found = new Set<string>();
  const add = (raw: string): void => {
    for (const form of [raw, safeDecode(raw)]) if (form.length >= MIN_SCRUBBED_LENGTH) found.add(form);
  };
  add(url.username);
  add(url.password);
  for (const pair of url.search.slice(1).split('&')) {
    const at = pair.indexOf('=');
    add(at === -1 ? pair : pair.slice(at + 1));
  }
  return [...found];
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text.replace(/\+/g, ' '));
  } catch {
    return text;
  }
}

function scrub(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) out = out.split(secret).join(MASK);
  return redactText(out);
}

/** Each static header's value, and what follows an auth scheme (`Bearer <token>`). */
function staticHeaderSecrets(headers: Readonly<Record<string, string>>): string[] {
  const found = new Set<string>();
  for (const value of Object.values(headers)) {
    const trimmed = value.trim();
    const space = trimmed.indexOf(' ');
    for (const form of [trimmed, space === -1 ? '' : trimmed.slice(space + 1).trim()]) {
      if (form.length >= MIN_SCRUBBED_LENGTH) found.add(form);
    }
  }
  return [...found];
}
