/**
 * The table mode's statements are built from fragments the WAL statements share: their text must
 * stay byte for byte what it was before WAL mode (a changed text is a new prepared statement and a
 * new plan — and, unnoticed, a changed table mode). Digests of the texts as of issue 13.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { enqueueStatements } from '../../src/producer/enqueue-sql.js';

const digest = (text: string) => createHash('sha256').update(text).digest('hex');

describe('table-mode statement text', () => {
  it('is unchanged without NOTIFY', () => {
    const s = enqueueStatements('"outbox"', null);
    expect(Object.fromEntries(Object.entries(s).map(([k, v]) => [k, digest(v)]))).toEqual({
      one: '94ec2933747a71b31a8b0fd1df267c6ec2eda7ded093d1f96ede780c3708819e',
      oneKnown: '51f0df2e34d41d039671605b9df242ab335b793d5f09f8c883c493f59c484b09',
      many: '9e784f408e7744fc6a0db9de1a78c8a8562dc4de4926fc73f910f7ffe96fa409',
      oneVersioned: '1d15415d33a6f7478d36b563f21f68d1e53475227fd405949665e9c7b07a56c8',
      manyVersioned: 'e86fde87261e7308e544a5a16ee365fb59ca37b79bac289360cc7d64ae4dbf35',
    });
  });

  it('is unchanged with NOTIFY', () => {
    const s = enqueueStatements('"outbox"', 'txo_outbox');
    expect(Object.fromEntries(Object.entries(s).map(([k, v]) => [k, digest(v)]))).toEqual({
      one: 'e267c45dc1ff5052156195a39014a9527abec2c6a9a1f7a3cbfbe13a0c1a1e47',
      oneKnown: '018f4eec6b4e087ac67ae8d3d6e7ab252b798062e85a61e8a7fb11fed9dcbe60',
      many: '86ba71a54ab2ca6c44d2202adf5ebcb7e78e52bcfcc963d840a97e7f52e34393',
      oneVersioned: 'a13da57aa71d5058e75ac995603151e4bd9b653f098078a6a53553062be7f22a',
      manyVersioned: 'c301b45f16fa947f7ffc7212e145b9a85ed1e193ec9635c730073234c794ccc5',
    });
  });
});
