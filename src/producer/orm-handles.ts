/**
 * Recognises the handles of the ORMs and drivers tx-outbox has an adapter for, by their shape
 * (none is imported): the core `enqueue` runs on node-postgres only, and a handle of another
 * library passed to it is refused with the subpath whose `enqueue` takes it. Some of them have a
 * `query` method (TypeORM's EntityManager and QueryRunner) that the core would otherwise call —
 * on the root manager, outside the caller's transaction.
 */

/** A handle of another library: what it is, and the subpath whose `enqueue` takes its transaction. */
export interface ForeignHandle {
  /** The library, for the message: `'Drizzle'`. */
  readonly orm: string;
  /** `'a Drizzle transaction'`, `'a Kysely database (not a transaction)'` … */
  readonly what: string;
  /** `'drizzle'`: `tx-outbox/drizzle`. */
  readonly subpath: string;
}

type Shape = Record<string | symbol, unknown>;

const fn = (o: Shape, ...names: string[]): boolean => names.every((n) => typeof o[n] === 'function');

/** Drizzle marks its classes with this registered symbol (`entityKind`). */
const DRIZZLE_KIND = Symbol.for('drizzle:entityKind');
/** TypeORM marks its EntityManager instances with this registered symbol under `@instanceof`. */
const TYPEORM_MANAGER = Symbol.for('EntityManager');

/** What `handle` is, when it is a handle of one of the libraries tx-outbox adapts; else undefined. */
export function foreignHandle(handle: unknown): ForeignHandle | undefined {
  if (handle === null || (typeof handle !== 'object' && typeof handle !== 'function')) return undefined;
  const o = handle as Shape;
  if (typeof handle === 'function') {
    // postgres.js: `sql` and a transaction's `sql` are tagged-template functions.
    if (fn(o, 'unsafe') && (fn(o, 'begin') || fn(o, 'savepoint'))) {
      return {
        what: fn(o, 'begin') ? 'a postgres.js sql (not a transaction)' : 'a postgres.js transaction',
        orm: 'postgres.js',
        subpath: 'postgres-js',
      };
    }
    // Knex: the instance and a transaction are query-builder functions.
    if (fn(o, 'raw', 'transaction') && typeof o['client'] === 'object') {
      return {
        what: o['isTransaction'] === true ? 'a Knex transaction' : 'a Knex instance (not a transaction)',
        orm: 'Knex',
        subpath: 'knex',
      };
    }
    return undefined;
  }
  const kind = (o['constructor'] as unknown as Shape | undefined)?.[DRIZZLE_KIND];
  if (typeof kind === 'string') {
    return {
      what: /Transaction/.test(kind)
        ? 'a Drizzle transaction'
        : `a Drizzle ${/Database/.test(kind) ? 'database' : kind} (not a transaction)`,
      orm: 'Drizzle',
      subpath: 'drizzle',
    };
  }
  if (fn(o, '$queryRawUnsafe', '$executeRawUnsafe')) {
    return {
      // An interactive transaction's client has no $connect (nor $disconnect, $on, $extends).
      what: fn(o, '$connect') ? 'a PrismaClient (not a transaction)' : 'a Prisma transaction client',
      orm: 'Prisma',
      subpath: 'prisma',
    };
  }
  if (typeof o['isTransaction'] === 'boolean' && fn(o, 'selectFrom', 'insertInto', 'executeQuery')) {
    return {
      what: o['isTransaction'] ? 'a Kysely transaction' : 'a Kysely database (not a transaction)',
      orm: 'Kysely',
      subpath: 'kysely',
    };
  }
  if (
    o['@instanceof'] === TYPEORM_MANAGER ||
    (fn(o, 'getRepository', 'transaction', 'query', 'createQueryBuilder') && 'connection' in o)
  ) {
    return { what: 'a TypeORM EntityManager', orm: 'TypeORM', subpath: 'typeorm' };
  }
  if (fn(o, 'startTransaction', 'commitTransaction', 'rollbackTransaction', 'query') && 'manager' in o) {
    return { what: 'a TypeORM QueryRunner', orm: 'TypeORM', subpath: 'typeorm' };
  }
  if (fn(o, 'transactional', 'getConnection', 'persist', 'flush')) {
    return { what: 'a MikroORM EntityManager', orm: 'MikroORM', subpath: 'mikro-orm' };
  }
  if (typeof o['em'] === 'object' && fn(o, 'getMetadata', 'close') && 'config' in o) {
    return { what: 'a MikroORM instance (not a transaction)', orm: 'MikroORM', subpath: 'mikro-orm' };
  }
  return undefined;
}
