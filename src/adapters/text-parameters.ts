/**
 * Parameters as PostgreSQL text, the way node-postgres sends them: the core's statements are
 * written for untyped parameters whose type the server infers from the SQL (`$8::bytea[]`), and
 * a driver that types or re-serialises them itself binds something else (postgres.js turns a JSON
 * string it sees bound to jsonb into a JSON string literal, and types `[Buffer, …]` as bytea).
 */

/** One parameter as the text PostgreSQL parses it from: null stays null. */
export function textParameter(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array)
    return `\\x${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex')}`;
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return arrayLiteral(value);
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/** An array literal (`{"a",NULL,"b"}`), nested arrays as nested braces, every element quoted. */
function arrayLiteral(values: readonly unknown[]): string {
  let out = '{';
  for (let i = 0; i < values.length; i++) {
    if (i > 0) out += ',';
    const value = values[i];
    if (value === null || value === undefined) out += 'NULL';
    else if (Array.isArray(value)) out += arrayLiteral(value);
    else out += `"${textParameter(value)!.replace(/[\\"]/g, '\\$&')}"`;
  }
  return `${out}}`;
}
