import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { bigintArray, textArray } from '../../src/relay/pg-array.js';
import { DATABASE_URL } from '../helpers/env.js';

describe('bigintArray', () => {
  it('writes decimal ids as one array literal, and leaves anything else to the driver', () => {
    expect(bigintArray(['1', '20', '9223372036854775807'])).toBe('{1,20,9223372036854775807}');
    expect(bigintArray([])).toBe('{}');
    for (const odd of [['1', '-2'], ['1', ''], ['1 ', '2'], ['1,2'], ['x']])
      expect(bigintArray(odd)).toBe(odd);
  });

  it('reads back in PostgreSQL as the driver would send it', async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      const ids = ['1', '42', '9223372036854775807'];
      const { rows } = await client.query<{ a: string[]; b: string[] }>(
        'SELECT $1::bigint[]::text[] AS a, $2::bigint[]::text[] AS b',
        [bigintArray(ids), ids],
      );
      expect(rows[0]).toEqual({ a: ids, b: ids });
    } finally {
      await client.end();
    }
  });
});

describe('textArray', () => {
  it('reads back in PostgreSQL exactly as the driver sends the same values (quotes, backslashes, commas, braces, the key separator, none)', async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      for (const values of [
        [],
        ['order\u001fo-1'],
        ['a"b', 'c\\d', 'e,f', '{g}', ' h ', 'NULL', '', 'ü\u001f€'],
      ]) {
        const { rows } = await client.query<{ a: string[]; b: string[] }>(
          'SELECT $1::text[] AS a, $2::text[] AS b',
          [textArray(values), values],
        );
        expect(rows[0]).toEqual({ a: values, b: values });
      }
    } finally {
      await client.end();
    }
  });
});
