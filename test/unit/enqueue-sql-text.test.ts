/**
 * The table mode's statements are built from fragments the WAL statements share: their text must
 * stay byte for byte what it was before WAL mode (a changed text is a new prepared statement and a
 * new plan — and, unnoticed, a changed table mode). Digests of the texts as of issue 13, and for
 * the default-sequence statements as of issue 26 (migration 15: each event names its previous one;
 * the WAL statements keep the sequence CTEs of before, which do not keep the chain).
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
      one: '3d03615a88df5b4980adb44c50d302ff12b477ec68c0fc7101b23b800ac7130e',
      oneKnown: 'b17bafb8311b843c5ab288003d1aa284673cfbdedc5aa0f699c9c01b9510ac95',
      many: '9b92611daf69c38feacd48cb63020fad7f2aca6574f505768e9d35ce1e5ae91c',
      oneVersioned: 'a13da57aa71d5058e75ac995603151e4bd9b653f098078a6a53553062be7f22a',
      manyVersioned: 'c301b45f16fa947f7ffc7212e145b9a85ed1e193ec9635c730073234c794ccc5',
    });
  });
});
