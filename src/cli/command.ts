/**
 * The preamble the database commands share (migrate, relay, status, dead, inbox): the
 * `--database-url`/`--schema`/`--log-level` flags, and a pool on that database for the time of
 * one run, ended whatever happens.
 */
import type { Command } from 'commander';
import type pg from 'pg';
import type { Logger as PinoLogger } from 'pino';
import {
  addDatabaseOptions,
  addLogLevelOption,
  createLogger,
  createPool,
  type DatabaseOptions,
  databaseUrl,
  type LogLevelOptions,
} from './common.js';

/** The flags every database command takes. */
export interface DatabaseCommandOptions extends DatabaseOptions, LogLevelOptions {}

/** Adds `--database-url`, `--schema` and `--log-level` (default `logLevel`) to `command`. */
export function withDatabaseOptions(command: Command, logLevel = 'warn'): Command {
  addDatabaseOptions(command);
  addLogLevelOption(command, logLevel);
  return command;
}

/** A subcommand of `parent` taking the database flags (listed before its own) and `--log-level warn`. */
export function databaseCommand(parent: Command, name: string, description: string): Command {
  return withDatabaseOptions(parent.command(name).description(description));
}

/**
 * Runs `fn` with a pool of `max` connections on the command's database (from `--database-url`,
 * else env DATABASE_URL) and a logger at `--log-level`; the pool is ended afterwards.
 */
export async function withPool<T>(
  options: DatabaseCommandOptions,
  max: number,
  fn: (pool: pg.Pool, logger: PinoLogger) => Promise<T>,
): Promise<T> {
  const url = databaseUrl(options);
  const logger = createLogger(options.logLevel);
  const pool = createPool(url, logger, max);
  try {
    return await fn(pool, logger);
  } finally {
    await pool.end();
  }
}
