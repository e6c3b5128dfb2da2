import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { migrate } from '../../src/schema/migrate.js';
import { type RoleKind, type RoleNames, type RolesSqlOptions, rolesSql } from '../../src/schema/roles.js';
import { DATABASE_URL } from './env.js';

export type RuntimeRoleKind = Exclude<RoleKind, 'migrator'>;
const RUNTIME: readonly RuntimeRoleKind[] = ['producer', 'relay', 'consumer', 'operator'];

/**
 * The least-privilege roles `tx-outbox roles` prints (src/schema/roles.ts), for a scratch schema
 * on the real PostgreSQL: the group roles and the schema (setup, as the admin), migrated, the
 * grants, and a LOGIN member of each runtime role. Roles are cluster-wide: their names carry the
 * schema's random name, and `drop()` removes them, after a failed test too.
 */
export interface LoginRoles {
  readonly schema: string;
  readonly roles: RoleNames;
  /** A superuser pool (the test's own database user). */
  readonly admin: pg.Pool;
  /** A pool logged in as the LOGIN member of `kind`'s group. */
  as(kind: RuntimeRoleKind): pg.Pool;
  /** Runs the grants section again, with these options (e.g. `relayPrunes`). */
  grant(options?: Omit<RolesSqlOptions, 'schema' | 'roles'>): Promise<void>;
  drop(): Promise<void>;
}

export async function createLoginRoles(prefix: string): Promise<LoginRoles> {
  const schema = `t_${prefix}_${randomBytes(4).toString('hex')}`;
  const { roles, setup } = rolesSql({ schema });
  const login = (kind: RuntimeRoleKind) => `${roles[kind]}_login`;
  const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  const pools = new Map<RuntimeRoleKind, pg.Pool>();
  const grant = async (options: Omit<RolesSqlOptions, 'schema' | 'roles'> = {}) => {
    await admin.query(rolesSql({ schema, ...options }).grants.join('\n'));
  };
  const drop = async () => {
    await Promise.allSettled([...pools.values()].map((p) => p.end()));
    try {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      const all = [...RUNTIME.map(login), ...Object.values(roles)];
      const { rows } = await admin.query<{ rolname: string }>(
        'SELECT rolname FROM pg_roles WHERE rolname = ANY ($1)',
        [all],
      );
      const names = rows.map((r) => `"${r.rolname}"`);
      if (names.length > 0) await admin.query(`DROP OWNED BY ${names.join(', ')}`);
      for (const role of all) await admin.query(`DROP ROLE IF EXISTS "${role}"`);
    } finally {
      await admin.end();
    }
  };
  try {
    await admin.query(setup.join('\n'));
    await migrate(admin, { schema });
    await grant();
    for (const kind of RUNTIME) {
      await admin.query(`CREATE ROLE "${login(kind)}" LOGIN IN ROLE "${roles[kind]}"`);
      const url = new URL(DATABASE_URL);
      url.username = login(kind);
      url.password = '';
      const pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
      pool.on('error', () => {});
      pools.set(kind, pool);
    }
  } catch (error) {
    await drop();
    throw error;
  }
  return {
    schema,
    roles,
    admin,
    as(kind) {
      const pool = pools.get(kind);
      if (!pool) throw new Error(`no pool for ${kind}`);
      return pool;
    },
    grant,
    drop,
  };
}
