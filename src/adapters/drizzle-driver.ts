/**
 * The driver client under a Drizzle session, as a `SqlExecutor`. Drizzle has no public raw query
 * with `$n` parameters short of its `sql` tag (a runtime value of drizzle-orm), so the adapter
 * talks to the client Drizzle itself runs the transaction on: `session.client`, a node-postgres
 * `PoolClient`/`Client` or a postgres.js `TransactionSql` (a `Sql` outside a transaction). Both
 * drivers' sessions have long kept it there under that name (read in 0.45's source, where it is
 * not in the public types; `_.session` is, hence the fallback).
 *
 * node-postgres' client is a `SqlExecutor` as it is. postgres.js binds parameters its own way,
 * so its executor adapts them (see `postgresJsValue`).
 */
import type { SqlExecutor } from './transactions.js';

/** node-postgres' `Client`, `PoolClient` or `Pool`, as far as the adapter uses it. */
export interface NodePgClientLike {
  query(config: { text: string; values: unknown[]; name?: string }): Promise<{ rows: unknown[] }>;
  getTransactionStatus?: () => string | null;
  /** EventEmitter's, for the 'error' listener the inbox's runner holds while in a transaction. */
  on?: (event: 'error', listener: (error: Error) => void) => unknown;
  removeListener?: (event: 'error', listener: (error: Error) => void) => unknown;
}

/** postgres.js' `Sql` or `TransactionSql`, as far as the adapter uses it. */
export interface PostgresJsClientLike {
  unsafe(query: string, parameters?: unknown[], options?: { prepare?: boolean }): PromiseLike<unknown[]>;
  /** Only on a `TransactionSql` (inside `sql.begin`, or a savepoint's). */
  savepoint?: unknown;
}

export type DriverClient =
  | { readonly driver: 'node-postgres'; readonly client: NodePgClientLike }
  | { readonly driver: 'postgres.js'; readonly client: PostgresJsClientLike };

/** The driver client a Drizzle session (`db.session`, `tx.session`, or `_.session`) runs on. */
export function sessionClient(handle: object): DriverClient | undefined {
  const h = handle as { session?: unknown; _?: { session?: unknown } };
  const session = h.session ?? h._?.session;
  if (session === null || typeof session !== 'object') return undefined;
  const client = (session as { client?: unknown }).client;
  if (client === null || (typeof client !== 'object' && typeof client !== 'function')) return undefined;
  // postgres.js' Sql is a function with `unsafe`; node-postgres' clients are objects with `query`.
  if (typeof (client as { unsafe?: unknown }).unsafe === 'function') {
    return { driver: 'postgres.js', client: client as PostgresJsClientLike };
  }
  if (typeof (client as { query?: unknown }).query === 'function') {
    return { driver: 'node-postgres', client: client as NodePgClientLike };
  }
  return undefined;
}

/** The executor on a driver client. */
export function driverExecutor(found: DriverClient): SqlExecutor {
  return found.driver === 'node-postgres'
    ? (found.client as unknown as SqlExecutor)
    : postgresJsExecutor(found.client);
}

/**
 * A `SqlExecutor` on a postgres.js client. `name` (a prepared statement's) maps to postgres.js'
 * own per-connection statement cache (`prepare: true`); postgres.js' `prepare: false` client
 * option still wins.
 */
export function postgresJsExecutor(client: PostgresJsClientLike): SqlExecutor {
  return {
    async query<R extends object = Record<string, unknown>>(query: {
      text: string;
      values: readonly unknown[];
      name?: string;
    }): Promise<{ rows: R[] }> {
      const rows = await client.unsafe(postgresJsText(query.text), query.values.map(postgresJsValue), {
        prepare: query.name !== undefined,
      });
      return { rows: rows as R[] };
    },
  };
}

const rewritten = new Map<string, string>();

/**
 * `$n::jsonb` becomes `$n::text::jsonb` (and `::jsonb[]` `::text[]::jsonb[]`, json alike). The
 * statements pass JSON as text; postgres.js asks the server for each parameter's type and runs
 * its serializer for it, and its jsonb serializer is `JSON.stringify` — the text would be stored
 * as a JSON string. drizzle-orm 0.45 replaces that serializer on the clients it is given, older
 * versions (0.30 …) do not: declared as text, the parameter is sent as it is on either.
 */
export function postgresJsText(text: string): string {
  let found = rewritten.get(text);
  if (found === undefined) {
    found = text.replace(/(\$\d+)::(jsonb?)(\[\])?(?![\w[])/gi, (_, p: string, type: string, arr?: string) =>
      arr ? `${p}::text[]::${type}[]` : `${p}::text::${type}`,
    );
    if (rewritten.size >= 1000) rewritten.clear();
    rewritten.set(text, found);
  }
  return found;
}

/**
 * One parameter for postgres.js, bound the way node-postgres binds it (what the statements are
 * written for). postgres.js infers a parameter's type from its value: a Date is declared
 * timestamptz and serialized by a serializer drizzle-orm replaces with the identity (so it would
 * go as `Date.toString()`), and an array is declared as its FIRST element's type — a `bytea[]`
 * starting with a Buffer as `bytea`, a `timestamptz[]` starting with a Date as `timestamptz`,
 * which the server refuses. So: a Date goes as its ISO text, an array as PostgreSQL array text
 * (declared unknown, typed by the server from the statement's cast), a bigint as its digits, a
 * plain object as JSON; strings, numbers, booleans, null and Buffers (bytea) as they are.
 */
export function postgresJsValue(value: unknown): unknown {
  if (value === undefined || value === null) return null;
  if (value instanceof Date) return value.toISOString();
  if (Array.isArray(value)) return arrayLiteral(value);
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'object' && !(value instanceof Uint8Array)) return JSON.stringify(value);
  return value;
}

/** PostgreSQL's text form of an array: `{"a",NULL,"\\x00ff"}`. */
export function arrayLiteral(values: readonly unknown[]): string {
  return `{${values.map(arrayElement).join(',')}}`;
}

function arrayElement(value: unknown): string {
  if (value === undefined || value === null) return 'NULL';
  if (Array.isArray(value)) return arrayLiteral(value);
  if (value instanceof Uint8Array) {
    return quoted(`\\x${Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex')}`);
  }
  if (value instanceof Date) return quoted(value.toISOString());
  if (typeof value === 'object') return quoted(JSON.stringify(value));
  return quoted(String(value));
}

function quoted(text: string): string {
  return `"${text.replace(/[\\"]/g, '\\$&')}"`;
}
