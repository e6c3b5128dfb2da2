/**
 * Reading the inbox's rows whatever the driver under the runner made of them: int4/int8 as
 * number, string or bigint; bytea as Buffer, Uint8Array or PostgreSQL's hex text; jsonb parsed or
 * as its text; boolean as boolean or `t`/`f`.
 */

/** A whole number (the inbox's counts and sequences are well inside the safe range). */
export function numberOf(value: unknown): number {
  return Number(value);
}

/** Text: a uuid, bigint or text column (a bigint may come as one). */
export function textOf(value: unknown): string {
  return typeof value === 'string' ? value : String(value);
}

export function booleanOf(value: unknown): boolean {
  return value === true || value === 't' || value === 'true' || value === 1;
}

/** Bytes of a bytea column. */
export function bytesOf(value: unknown): Buffer {
  if (value instanceof Uint8Array) return Buffer.from(value);
  if (typeof value === 'string' && value.startsWith('\\x')) return Buffer.from(value.slice(2), 'hex');
  if (Array.isArray(value)) return Buffer.from(value as number[]);
  return Buffer.from(String(value ?? ''), 'utf8');
}

/** A jsonb column, parsed (null stays null). */
export function jsonOf<T>(value: unknown): T | null {
  if (value === null || value === undefined) return null;
  return (typeof value === 'string' ? JSON.parse(value) : value) as T;
}
