/**
 * Array parameters the relay sends on every batch (a thousand event ids), written as PostgreSQL
 * array literals in one join. node-postgres would quote and escape each element (two regular
 * expressions and a concatenation per id), which costs several times more for the same text.
 */

/** `{1,2,3}` when every id is a decimal integer (bigint ids as text); else the ids, for the driver to quote. */
export function bigintArray(ids: readonly string[]): string | readonly string[] {
  for (const id of ids) {
    if (id.length === 0) return ids;
    for (let i = 0; i < id.length; i += 1) {
      const c = id.charCodeAt(i);
      if (c < 48 || c > 57) return ids;
    }
  }
  return `{${ids.join(',')}}`;
}

/**
 * `{"a","b"}`: text values as one array literal, each quoted (a backslash or a double quote
 * escaped), in one pass — the aggregate keys a claim leaves out or withholds.
 */
export function textArray(values: readonly string[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i += 1) {
    const v = values[i]!;
    if (i > 0) out += ',';
    out += v.includes('"') || v.includes('\\') ? `"${v.replace(/[\\"]/g, '\\$&')}"` : `"${v}"`;
  }
  return `${out}}`;
}
