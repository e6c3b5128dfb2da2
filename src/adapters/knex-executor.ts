/**
 * A SqlExecutor on a Knex instance or transaction, through `raw(sql, bindings)` (Knex's own API:
 * the statement runs on the transaction's connection and shows in Knex's query events). Shared by
 * the Knex adapter and the MikroORM one, whose SQL drivers run on Knex. A statement the core
 * prepares keeps its name: `.options({ name })` reaches node-postgres.
 */
import { toKnexRaw } from './knex-bindings.js';
import type { SqlExecutor } from './transactions.js';

/** A query of `raw()`: awaited, node-postgres' result (`rows`); `options` go to the driver. */
export interface KnexRawLike extends PromiseLike<unknown> {
  options(options: { readonly name: string }): KnexRawLike;
}

/** What the adapter uses of a Knex instance or transaction: its raw queries. */
export interface KnexQueryableLike {
  raw(sql: string, bindings: readonly unknown[]): KnexRawLike;
  readonly isTransaction?: boolean;
}

/**
 * An executor on `db` (a transaction, or the instance's pool for autocommit statements).
 * `beforeSend` runs right before each statement goes to Knex: the adapter's "still in the
 * transaction?" check, repeated after whatever the caller awaited since its first one.
 */
export function knexExecutor(db: KnexQueryableLike, beforeSend?: () => void): SqlExecutor {
  return {
    async query<R extends object>(query: { text: string; values: readonly unknown[]; name?: string }) {
      beforeSend?.();
      const { sql, bindings } = toKnexRaw(query.text, query.values);
      let raw = db.raw(sql, bindings);
      if (query.name !== undefined) raw = raw.options({ name: query.name });
      const result = (await raw) as { rows?: R[] } | undefined;
      return { rows: result?.rows ?? [] };
    },
  };
}
