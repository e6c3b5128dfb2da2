/**
 * The table mode's statements are built from fragments the WAL statements share: their text must
 * stay byte for byte what it was before WAL mode (a changed text is a new prepared statement and a
 * new plan — and, unnoticed, a changed table mode). Digests of the texts as of issue 13, and for
 * the default-sequence statements as of issue 26 (migration 15: each event names its previous one;
 * the WAL statements keep the sequence CTEs of before, which do not keep the chain). With NOTIFY,
 * the one-event statements as of issue 26's second half: the wake-up check a one-time filter of
 * the event's row instead of a CTE joined to it.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { enqueueStatements } from '../../src/producer/enqueue-sql.js';

const digest = (text: string) => createHash('sha256').update(text).digest('hex');

describe('table-mode statement text', () => {
  it('is unchanged without NOTIFY', () => {
    const s = enqueueStatements('"outbox"', null);
    expect(Object.fromEntries(Object.entries(s).map(([k, v]) => [k, digest(v)]))).toEqual({
      one: '4215ece91228bdaf16da7b48977c2d9a8992bffd220a180efc078fd5877a166a',
      oneKnown: '231b66782539ec585f1f9899e65dc08c1dec8dd69f7b78af59b3d3db14d85a3e',
      many: 'd7c8e73c90886eab2586225984e3b166eee846f49ef3072b59468825b17ca921',
      oneVersioned: '1d15415d33a6f7478d36b563f21f68d1e53475227fd405949665e9c7b07a56c8',
      manyVersioned: 'e86fde87261e7308e544a5a16ee365fb59ca37b79bac289360cc7d64ae4dbf35',
    });
  });

  it('is unchanged with NOTIFY', () => {
    const s = enqueueStatements('"outbox"', 'txo_outbox');
    expect(Object.fromEntries(Object.entries(s).map(([k, v]) => [k, digest(v)]))).toEqual({
      one: '5f2532281358e9507df8038738bb5284ba7fb4778832ec9da266bc72b22ea824',
      oneKnown: '31fdf455a356c9d7f1bc6ecd9e52110df1d60f6b27548691ddc3210f4cc2708a',
      many: '9b92611daf69c38feacd48cb63020fad7f2aca6574f505768e9d35ce1e5ae91c',
      oneVersioned: '0e78c791e0e7117ee021daa4fc15bec06934ef5ca74bc39bcd70728e2dfbef62',
      manyVersioned: 'c301b45f16fa947f7ffc7212e145b9a85ed1e193ec9635c730073234c794ccc5',
    });
  });
});
