// STAND-IN (core): replaced by wire's src/cdc/lsn.ts when merged.
/** A WAL position. */
export type Lsn = bigint;

export function parseLsn(text: string): Lsn {
  const [hi, lo] = text.split('/');
  return (BigInt(`0x${hi}`) << 32n) | BigInt(`0x${lo}`);
}

export function formatLsn(n: Lsn): string {
  return `${(n >> 32n).toString(16).toUpperCase()}/${(n & 0xffffffffn).toString(16).toUpperCase()}`;
}
