/**
 * The CloudEvents `source` attribute a publisher stamps on every event (its `ceSource` option,
 * `--ce-source` on the command line): a URI-reference (RFC 3986), e.g.
 * `https://orders.example.com`, `urn:example:orders` or `/orders`. Checked once, when the
 * publisher is created, so no event goes out with a source a CloudEvents SDK refuses.
 */
import { isIPv6 } from 'node:net';
import { OutboxValidationError } from '../errors.js';

export const DEFAULT_CE_SOURCE = 'tx-outbox';

/**
 * Longest source, in characters (all ASCII): it travels in every message, and RabbitMQ hands a
 * header value of 256 bytes or more to AMQP 1.0 consumers as binary instead of a string.
 */
export const MAX_CE_SOURCE_LENGTH = 255;

/** RFC 3986 characters (unreserved, reserved) and `%XX`. */
const URI_REFERENCE = /^(?:[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+$/;
/** A scheme, when the first segment has a colon. */
const SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*$/;

/**
 * A publisher's `ceSource` option (the deprecated `source` already moved to it), checked; named in
 * an error as the caller spelled it in `given`, the options before the renames.
 */
export function ceSourceOption(given: object, value: unknown): string {
  const spelled = given as Readonly<Record<string, unknown>>;
  return ceSourceOf(
    value,
    spelled['ceSource'] === undefined && spelled['source'] !== undefined ? 'source' : 'ceSource',
  );
}

/** `source`, or the default when it is undefined; throws naming `field` when it is not a URI-reference. */
export function ceSourceOf(source: unknown, field = 'ceSource'): string {
  if (source === undefined) return DEFAULT_CE_SOURCE;
  const fix = `Pass a URI-reference such as 'https://orders.example.com', 'urn:example:orders' or '/orders', or omit it (default '${DEFAULT_CE_SOURCE}').`;
  if (typeof source !== 'string' || source.length === 0) {
    throw new OutboxValidationError(
      field,
      typeof source === 'string' ? 'is empty' : `is a ${typeof source}`,
      fix,
    );
  }
  if (source.length > MAX_CE_SOURCE_LENGTH) {
    throw new OutboxValidationError(
      field,
      `is ${source.length} characters long (it travels in every message, and RabbitMQ hands a longer one to AMQP 1.0 consumers as binary)`,
      `Keep it to ${MAX_CE_SOURCE_LENGTH}.`,
    );
  }
  if (!URI_REFERENCE.test(source)) {
    const index = source.search(/[^A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]/);
    const why =
      index === -1
        ? "has a '%' not followed by two hex digits"
        : `has ${JSON.stringify(source[index])} at index ${index}, which a URI cannot hold unencoded`;
    throw new OutboxValidationError(field, `${why} (the CloudEvents source is a URI-reference)`, fix);
  }
  const shape = shapeProblem(source);
  if (shape !== undefined) {
    throw new OutboxValidationError(field, `${shape} (the CloudEvents source is a URI-reference)`, fix);
  }
  const colon = source.indexOf(':');
  const slash = source.search(/[/?#]/);
  if (colon !== -1 && (slash === -1 || colon < slash) && !SCHEME.test(source.slice(0, colon))) {
    throw new OutboxValidationError(
      field,
      `starts with ${JSON.stringify(source.slice(0, colon + 1))}, which is not a URI scheme`,
      fix,
    );
  }
  return source;
}

/** The host of `scheme://[…]` or `//[…]`, with optional user info and port: where RFC 3986 allows brackets. */
const IP_LITERAL = /^(?:[A-Za-z][A-Za-z0-9+.-]*:)?\/\/(?:[^/?#@[\]]*@)?\[([^\]]*)\](?::[0-9]*)?(?:[/?#]|$)/;
const IP_FUTURE = /^v[0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+$/;

/** Where `#` and brackets sit where a URI-reference cannot have them, or undefined. */
function shapeProblem(source: string): string | undefined {
  const hash = source.indexOf('#');
  if (hash !== -1 && source.indexOf('#', hash + 1) !== -1) return "has a second '#' (only one fragment)";
  if (!source.includes('[') && !source.includes(']')) return undefined;
  const literal = IP_LITERAL.exec(source);
  const host = literal?.[1];
  const bracketsElsewhere =
    literal === null ||
    /[[\]]/.test(source.slice(literal[0].length)) ||
    source.indexOf('[') !== source.lastIndexOf('[');
  if (host === undefined || bracketsElsewhere || !(isIPv6(host) || IP_FUTURE.test(host))) {
    return "has '[' or ']' outside an IP-literal host such as http://[::1]/";
  }
  return undefined;
}
