// STAND-IN (core): replaced by wire's src/cdc/pgoutput.ts when merged.
import type { Lsn } from './lsn.js';

export type PgoutputMessage =
  | { tag: 'begin'; finalLsn: Lsn; commitTime: Date; xid: number }
  | { tag: 'commit'; commitLsn: Lsn; endLsn: Lsn; commitTime: Date }
  | { tag: 'relation'; relationId: number; schema: string; table: string; columns: readonly string[] }
  | {
      tag: 'insert';
      relationId: number;
      schema: string;
      table: string;
      columns: readonly string[];
      values: readonly (string | null)[];
    }
  | { tag: 'message'; transactional: boolean; lsn: Lsn; prefix: string; content: Buffer }
  | { tag: 'origin' | 'type' | 'ignored' };

const PG_EPOCH_MS = 946_684_800_000n;

function pgTime(us: bigint): Date {
  return new Date(Number(us / 1000n + PG_EPOCH_MS));
}

/** Parses a timestamptz in ISO DateStyle ('2026-12-01 23:17:13.123456+00'). */
export function parseTimestamptz(text: string): Date {
  if (text === 'infinity') return new Date(8.64e15);
  if (text === '-infinity') return new Date(-8.64e15);
  const m = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(\.\d+)?([+-]\d\d)(?::?(\d\d))?(?::?(\d\d))?$/.exec(text);
  if (!m) return new Date(Number.NaN);
  const frac = (m[3] ?? '.0').slice(0, 4).padEnd(4, '0');
  return new Date(`${m[1]}T${m[2]}${frac}${m[4]}:${m[5] ?? '00'}`);
}

export class PgoutputDecoder {
  readonly #relations = new Map<number, { schema: string; table: string; columns: string[] }>();

  decode(buf: Buffer): PgoutputMessage {
    let o = 1;
    const str = (): string => {
      const end = buf.indexOf(0, o);
      const s = buf.toString('utf8', o, end);
      o = end + 1;
      return s;
    };
    switch (buf[0]) {
      case 0x42: // B
        return {
          tag: 'begin',
          finalLsn: buf.readBigUInt64BE(1),
          commitTime: pgTime(buf.readBigInt64BE(9)),
          xid: buf.readUInt32BE(17),
        };
      case 0x43: // C
        return {
          tag: 'commit',
          commitLsn: buf.readBigUInt64BE(2),
          endLsn: buf.readBigUInt64BE(10),
          commitTime: pgTime(buf.readBigInt64BE(18)),
        };
      case 0x52: {
        // R
        const relationId = buf.readUInt32BE(1);
        o = 5;
        const schema = str();
        const table = str();
        o += 1;
        const n = buf.readInt16BE(o);
        o += 2;
        const columns: string[] = [];
        for (let i = 0; i < n; i++) {
          o += 1;
          columns.push(str());
          o += 8;
        }
        this.#relations.set(relationId, { schema, table, columns });
        return { tag: 'relation', relationId, schema, table, columns };
      }
      case 0x49: {
        // I
        const relationId = buf.readUInt32BE(1);
        const rel = this.#relations.get(relationId);
        o = 6;
        const n = buf.readInt16BE(o);
        o += 2;
        const values: (string | null)[] = [];
        for (let i = 0; i < n; i++) {
          const kind = buf[o];
          o += 1;
          if (kind === 0x74) {
            const len = buf.readInt32BE(o);
            o += 4;
            values.push(buf.toString('utf8', o, o + len));
            o += len;
          } else values.push(null);
        }
        return {
          tag: 'insert',
          relationId,
          schema: rel?.schema ?? '',
          table: rel?.table ?? '',
          columns: rel?.columns ?? [],
          values,
        };
      }
      case 0x4d: {
        // M
        const transactional = buf[1] === 1;
        const lsn = buf.readBigUInt64BE(2);
        o = 10;
        const prefix = str();
        const len = buf.readInt32BE(o);
        o += 4;
        return { tag: 'message', transactional, lsn, prefix, content: buf.subarray(o, o + len) };
      }
      case 0x4f:
        return { tag: 'origin' };
      case 0x59:
        return { tag: 'type' };
      default:
        return { tag: 'ignored' };
    }
  }
}
