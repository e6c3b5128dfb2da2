/**
 * Character rules shared by everything `enqueue` validates: what PostgreSQL cannot store and
 * what no transport carries intact.
 */

/** A NUL or a UTF-16 surrogate: the cheap test before the exact one. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is exactly what it looks for
const MAYBE_UNSTORABLE = /[\u0000\uD800-\uDFFF]/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Why PostgreSQL cannot store `value` as text or in jsonb (a NUL, a lone surrogate), or
 * undefined. Runs on every string of a payload: a single cheap test in the common case.
 */
export function unstorableProblem(value: string): string | undefined {
  if (!MAYBE_UNSTORABLE.test(value)) return undefined;
  const nul = value.indexOf('\u0000');
  if (nul !== -1) return `contains a NUL character (at index ${nul}), which PostgreSQL cannot store`;
  const lone = LONE_SURROGATE.exec(value);
  if (lone) return `contains a lone UTF-16 surrogate (at index ${lone.index}), which is not valid Unicode`;
  return undefined;
}

/**
 * Control characters (NUL: PostgreSQL; CR, LF: header framing; the others: MQTT, where
 * Mosquitto drops the connection), lone surrogates (no UTF-8 form) and Unicode noncharacters
 * (MQTT strings must not hold them), and U+FFFD (what every client decodes invalid UTF-8 to, so
 * a reader could not tell two broken ids apart).
 */
const UNCARRIED = /[\p{Cc}\p{Cs}\p{Noncharacter_Code_Point}\uFFFD]/u;

/** The first character of `value` no transport carries intact, or undefined. */
export function uncarriedCharacter(
  value: string,
): { readonly code: string; readonly kind: string; readonly index: number } | undefined {
  const bad = UNCARRIED.exec(value);
  if (!bad) return undefined;
  const char = bad[0];
  const code = `U+${char.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`;
  const kind = /\p{Cc}/u.test(char)
    ? 'a control character'
    : /\p{Cs}/u.test(char)
      ? 'a lone UTF-16 surrogate'
      : char === '\uFFFD'
        ? 'the replacement character, which broken bytes decode to: two different ids would read the same'
        : 'a Unicode noncharacter';
  return { code, kind, index: bad.index };
}

/** Why some transport cannot carry `value` intact in a header, subject or key, or undefined. */
export function uncarriedProblem(value: string): string | undefined {
  const bad = uncarriedCharacter(value);
  return bad === undefined ? undefined : `contains ${bad.code} (${bad.kind}) at index ${bad.index}`;
}

/** JavaScript's whitespace (what `trim()` removes: NATS trims header values, HTTP trims SP and HTAB). */
export const EDGE_WHITESPACE = /^\s|\s$/;
