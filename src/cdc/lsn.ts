/**
 * PostgreSQL log sequence numbers. A bigint, so the ordering and arithmetic are exact over the whole
 * 64-bit range (a JS number loses precision past 2^53 bytes of WAL).
 */
import { OutboxValidationError } from '../errors.js';

export type Lsn = bigint;

const LSN_TEXT = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;

/** Parses PostgreSQL's text form ('16/B374D848'). */
export function parseLsn(text: string): Lsn {
  const match = LSN_TEXT.exec(text);
  if (match === null) {
    throw new OutboxValidationError(
      'lsn',
      `'${text}' is not a log sequence number`,
      "Use the form '16/B374D848'",
    );
  }
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

/** PostgreSQL's text form: upper and lower 32 bits in upper-case hex, without leading zeros. */
export function formatLsn(lsn: Lsn): string {
  const hi = Number(lsn >> 32n);
  const lo = Number(lsn & 0xffffffffn);
  return `${hi.toString(16).toUpperCase()}/${lo.toString(16).toUpperCase()}`;
}
