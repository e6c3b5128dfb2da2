/**
 * node-postgres through the adapter conformance suite: the core `enqueue` on a PoolClient inside
 * `inTransaction`, and the inbox on `pgTransactions(pool)` — what `createInbox({ pool })` runs on.
 */
import pg from 'pg';
import { pgTransactions } from '../../src/adapters/pg.js';
import { enqueue } from '../../src/producer/enqueue.js';
import { inTransaction } from '../../src/producer/transaction.js';
import { DATABASE_URL } from '../helpers/env.js';
import { adapterConformance } from './conformance.js';

adapterConformance<pg.PoolClient>(
  {
    name: 'pg',
    enqueue,
    async open(url, schema) {
      const pool = new pg.Pool({ connectionString: url, max: 8 });
      pool.on('error', () => undefined);
      const idle = await pool.connect();
      return {
        transaction: (fn) => inTransaction(pool, fn),
        async insertBusiness(tx, id, note) {
          await tx.query(`INSERT INTO "${schema}".business (id, note) VALUES ($1, $2)`, [id, note ?? null]);
        },
        async readPrepared(tx, id) {
          const { rows } = await tx.query<{ note: string | null }>({
            name: `business_note_${schema}`,
            text: `SELECT note FROM "${schema}".business WHERE id = $1`,
            values: [id],
          });
          return rows[0]?.note ?? undefined;
        },
        nonTransactional: () => [pool, idle],
        transactions: () => pgTransactions(pool),
        async close() {
          idle.release();
          await pool.end();
        },
      };
    },
  },
  DATABASE_URL,
);
