/**
 * The CDC relay's partitionOf (src/producer/partition-of.ts) is PostgreSQL's partition_of
 * (009_producer.sql) for every key: the relay marks a WAL-mode message dead when the partition it
 * claims differs, so one wrong answer would kill genuine events. Random keys of every length a
 * lookup3 block boundary can cut (0–40 bytes a side), ASCII, accented, CJK, emoji and control
 * characters; the schema's own function and the raw expression for other partition counts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { partitionOf } from '../../src/producer/partition-of.js';
import { createTestDb, type TestDb } from '../helpers/db.js';

let db: TestDb;
beforeAll(async () => {
  db = await createTestDb('partition_of', { partitions: 16 });
});
afterAll(async () => {
  await db?.close();
});

const ALPHABET = [...'abcXYZ019 -_./:é注文🚀\u0001\u007f'];

function randomText(max: number, random: () => number): string {
  let s = '';
  const length = Math.floor(random() * (max + 1));
  for (let i = 0; i < length; i++) s += ALPHABET[Math.floor(random() * ALPHABET.length)];
  return s;
}

/** A small deterministic generator: the same keys every run. */
function seeded(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x / 2147483648;
  };
}

describe('partitionOf', () => {
  it('gives what partition_of gives, for 3,000 keys and partition counts 1, 3, 16, 1000, 1024', async () => {
    const random = seeded(24);
    const keys = Array.from({ length: 3000 }, () => [randomText(20, random), randomText(20, random)]);
    keys.push(['', ''], ['order', ''], ['', 'x'], ['a'.repeat(11), 'b'.repeat(12)]);
    const types = keys.map((k) => k[0]!);
    const ids = keys.map((k) => k[1]!);
    const own = await db.pool.query<{ p: number }>(
      `SELECT "${db.schema}".partition_of(t, i) AS p FROM unnest($1::text[], $2::text[]) AS k(t, i)`,
      [types, ids],
    );
    expect(keys.filter((k, j) => partitionOf(k[0]!, k[1]!, 16) !== own.rows[j]!.p)).toEqual([]);
    for (const n of [1, 3, 1000, 1024]) {
      const { rows } = await db.pool.query<{ p: number }>(
        `SELECT ((hashtextextended(t || chr(31) || i, 0) & 9223372036854775807) % $3::bigint)::int AS p
         FROM unnest($1::text[], $2::text[]) AS k(t, i)`,
        [types, ids, n],
      );
      expect(keys.filter((k, j) => partitionOf(k[0]!, k[1]!, n) !== rows[j]!.p)).toEqual([]);
    }
  });
});
