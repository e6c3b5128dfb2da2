/**
 * Secrets out of logs, error messages, `events.last_error` and CLI output: an address's
 * password (or a lone user name, which is often a token) and its query values become
 * `***`; scheme, host, port, path and query keys stay, so the address is still
 * recognisable.
 */

const MASK = '***';

/**
 * URL-like substrings of free text: `scheme://`, then a user-info part up to its last `@`
 * (it may hold any character RFC 3986 allows there unencoded — `( ) ' , ; = & $ + ! *` —
 * and a careless `@`), then an IPv6 literal in brackets, then the rest up to whitespace, a
 * quote or a bracket. A comma ends the address only where another `scheme://` follows
 * (lists of servers); otherwise it may be part of a query value.
 */
const URL_IN_TEXT =
  /\b[a-z][a-z0-9+.-]*:\/\/(?:[^\s/?#"<>`]*@)?(?:\[[0-9a-z:.%]*\])?(?:[^\s'"<>()[\]{}`,]|,(?![a-z][a-z0-9+.-]*:\/\/))*/gi;

/**
 * An address safe to show: `https://user:***@host/path?token=***`. A lone user name
 * (`https://token@host`) becomes `***@`; the fragment is dropped. Text that does not parse
 * as a URL gets the same treatment from a pattern, so a malformed address with a secret in
 * it is not echoed back either.
 */
export function redactUrl(url: string | URL): string {
  const text = String(url);
  let parsed: URL;
  try {
    // `user:pass@host:4222` (no scheme, as NATS accepts) would parse as the scheme `user:`.
    if (!text.includes('://')) return redactUnparsed(text);
    parsed = new URL(text);
  } catch {
    return redactUnparsed(text);
  }
  // Special schemes (http, https, ws …) are serialised by URL itself; for others (amqp,
  // redis, nats, mqtt …) the URL standard keeps the authority as written, so both paths
  // rebuild the address from its parts.
  const userinfo =
    parsed.password !== '' ? `${parsed.username}:${MASK}@` : parsed.username !== '' ? `${MASK}@` : '';
  const authority = parsed.host === '' && !text.includes('//') ? '' : `//${userinfo}${parsed.host}`;
  return `${parsed.protocol}${authority}${parsed.pathname}${redactQuery(parsed.search)}`;
}

/**
 * Free text (an error message, a client library's error, a response body) with every
 * URL in it passed through {@link redactUrl}. A safety net where text from elsewhere is
 * recorded or logged; code that builds a message from an address calls `redactUrl` itself.
 */
export function redactText(text: string): string {
  return text.replace(URL_IN_TEXT, (match) => {
    // A sentence may end right after an address: keep the full stop out of it.
    const trailing = /[.:;!?,]+$/.exec(match)?.[0] ?? '';
    return redactUrl(match.slice(0, match.length - trailing.length)) + trailing;
  });
}

function redactQuery(search: string): string {
  if (search === '' || search === '?') return '';
  const parts = search
    .slice(1)
    .split('&')
    .map((pair) => {
      const at = pair.indexOf('=');
      // A bare `?s3cret` may be the token itself.
      return at === -1 ? MASK : `${pair.slice(0, at)}=${MASK}`;
    });
  return `?${parts.join('&')}`;
}

function redactUnparsed(text: string): string {
  return (
    text
      // Up to the last `@` before the path: a password may hold an unencoded one.
      .replace(/^([a-z][a-z0-9+.-]*:\/\/)?([^/?#]*)@/i, (_, scheme: string | undefined, userinfo: string) => {
        const colon = userinfo.indexOf(':');
        return `${scheme ?? ''}${colon === -1 ? MASK : `${userinfo.slice(0, colon)}:${MASK}`}@`;
      })
      .replace(/\?[^#]*/, (search) => redactQuery(search))
      .replace(/#.*$/, '')
  );
}

/**
 * A log record with {@link redactText} applied to every string in it (nested objects and
 * arrays too, a few levels deep, below which an object becomes its redacted JSON text);
 * Errors are left to the logger's error serializer.
 */
export function redactFields<T>(value: T, depth = 4): T {
  if (typeof value === 'string') return redactText(value) as T;
  if (value === null || typeof value !== 'object' || value instanceof Error) return value;
  // Deeper than we walk is not a way around the redaction.
  if (depth === 0) return redactText(jsonText(value)) as T;
  if (Array.isArray(value)) return value.map((item: unknown) => redactFields(item, depth - 1)) as T;
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) out[key] = redactFields(item, depth - 1);
  return out as T;
}

function jsonText(value: object): string {
  try {
    return JSON.stringify(value) ?? '';
  } catch {
    return '[not serialisable]';
  }
}
