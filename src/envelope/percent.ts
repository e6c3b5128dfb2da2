/**
 * Percent-encoding of header values, as the CloudEvents HTTP binding says (§3.1.3.2) and the
 * NATS binding follows: the sender encodes space, `"`, `%` and every character outside
 * U+0021–U+007E as the `%XX` of its UTF-8 bytes; the receiver undoes a quoted string, then
 * decodes exactly once and refuses invalid UTF-8. Everything else is sent as it is, so plain
 * values stay byte-identical for readers that do not decode.
 */

/** Values that need no encoding: visible ASCII other than `"` and `%` (the common case). */
const PLAIN = /^[!#$&-~]*$/;

const HEX = '0123456789ABCDEF';

/** `%XX` of each ASCII character the binding encodes (space, `"`, `%`, controls, DEL). */
const ASCII_ESCAPES: readonly string[] = Array.from({ length: 128 }, (_, code) =>
  code > 0x20 && code < 0x7f && code !== 0x22 && code !== 0x25
    ? String.fromCharCode(code)
    : `%${HEX[code >> 4]}${HEX[code & 15]}`,
);

/**
 * `value` with every character the binding names percent-encoded (UTF-8, upper-case hex). Runs
 * of non-ASCII go through `encodeURIComponent`, which writes exactly that; it throws a
 * `URIError` on a lone surrogate, which has no UTF-8 form (enqueue refuses them).
 */
export function percentEncode(value: string): string {
  if (PLAIN.test(value)) return value;
  let out = '';
  let from = 0;
  for (let i = 0; i < value.length; i += 1) {
    const code = value.charCodeAt(i);
    if (code > 0x20 && code < 0x7f && code !== 0x22 && code !== 0x25) continue;
    if (i > from) out += value.slice(from, i);
    if (code < 0x80) {
      out += ASCII_ESCAPES[code];
      from = i + 1;
      continue;
    }
    let end = i + 1;
    while (end < value.length && value.charCodeAt(end) >= 0x80) end += 1;
    out += encodeURIComponent(value.slice(i, end));
    from = end;
    i = end - 1;
  }
  return out + value.slice(from);
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

function hexValue(code: number): number {
  if (code >= 48 && code <= 57) return code - 48;
  const lower = code | 0x20;
  return lower >= 97 && lower <= 102 ? lower - 87 : -1;
}

/** An RFC 9110 quoted string's content: the quotes removed, each `\x` read as `x`. */
function unquoted(value: string): string {
  let out = '';
  for (let i = 1; i < value.length - 1; i += 1) {
    const char = value[i]!;
    if (char === '\\' && i + 1 < value.length - 1) {
      i += 1;
      out += value[i];
    } else {
      out += char;
    }
  }
  return out;
}

/**
 * The value a percent-encoded header carries. Throws a `RangeError` on a `%` not followed by
 * two hex digits and on bytes that are not UTF-8 (the binding says to refuse them).
 */
export function percentDecode(encoded: string): string {
  const value =
    encoded.length >= 2 && encoded[0] === '"' && encoded.endsWith('"') ? unquoted(encoded) : encoded;
  if (!value.includes('%')) return value;
  const bytes: number[] = [];
  for (let i = 0; i < value.length; i += 1) {
    const code = value.charCodeAt(i);
    if (code === 0x25) {
      const high = hexValue(value.charCodeAt(i + 1));
      const low = hexValue(value.charCodeAt(i + 2));
      if (high < 0 || low < 0) {
        throw new RangeError(`'%' at index ${i} is not followed by two hex digits`);
      }
      bytes.push(high * 16 + low);
      i += 2;
    } else if (code < 0x80) {
      bytes.push(code);
    } else {
      // A lenient sender's raw character: its own UTF-8 bytes.
      const char = String.fromCodePoint(value.codePointAt(i)!);
      for (const byte of Buffer.from(char, 'utf8')) bytes.push(byte);
      i += char.length - 1;
    }
  }
  try {
    return utf8.decode(Uint8Array.from(bytes));
  } catch {
    throw new RangeError('its percent-encoded bytes are not UTF-8');
  }
}
