/**
 * Loads the `--orm` variant. Each is imported only when chosen: the CLI starts without Drizzle or
 * Prisma installed, and a missing one becomes a one-line error saying what to install.
 */

import { errorMessage } from '../../../errors.js';
import { CliError } from '../../common.js';
import type { OpenOrm, OrmName } from './variant.js';

export { ORM_NAMES, type OrmName } from './variant.js';

/** The packages each variant needs besides tx-outbox's own dependencies. */
const NEEDS: Readonly<Record<OrmName, string>> = {
  pg: 'pg',
  drizzle: 'drizzle-orm',
  prisma: 'prisma @prisma/client @prisma/adapter-pg',
};

/** The variant's `open`. */
export async function loadOrm(name: OrmName): Promise<OpenOrm> {
  try {
    switch (name) {
      case 'pg':
        return (await import('./pg.js')).open;
      case 'drizzle':
        return (await import('./drizzle.js')).open;
      case 'prisma':
        return (await import('./prisma.js')).open;
    }
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new CliError(
      `the demo's --orm ${name} needs ${NEEDS[name]}, not installed here (npm install --save-dev ` +
        `${NEEDS[name]}): ${errorMessage(error)}`,
      1,
      { cause: error },
    );
  }
}
