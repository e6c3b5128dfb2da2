/**
 * node-postgres' `options` making every transaction of a connection SERIALIZABLE by default: a
 * transaction that reads READ COMMITTED there was opened at READ COMMITTED on purpose.
 */
export const SERIALIZABLE = '-c default_transaction_isolation=serializable';
