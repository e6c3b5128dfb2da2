/**
 * What every `tx-outbox` command shares: the database and schema options, the
 * pool, the pino logger on stderr, option parsers, and the one error handler
 * that turns any failure into one line and an exit code that means something.
 */

import { readFileSync } from 'node:fs';
import { type Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import pg from 'pg';
import { type Logger as PinoLogger, pino } from 'pino';
import { errorMessage, OutboxValidationError } from '../errors.js';
import { DATABASE_CONNECT_CODES } from '../network-errors.js';
import { redactFields, redactText } from '../redact.js';
import { quoteSchema } from '../schema/identifiers.js';
import { DEFAULT_SCHEMA } from '../schema/migrate.js';
import { warnSecretsOnCommandLine } from './argv-secrets.js';

/** Exit code for bad usage or invalid input. */
export const EXIT_USAGE = 2;
/** Exit code for a runtime failure. */
export const EXIT_FAILURE = 1;
/**
 * Exit code when an id given on the command line names nothing the command can act on: not found
 * (`event`, `dead show`, `inbox show`), or not dead / not quarantined any more (`dead replay`,
 * `dead skip`, `inbox release`, which still act on the other ids given). A script sees the typo.
 */
export const EXIT_NOT_FOUND = 3;
/** Exit code after an interrupt (128 + SIGINT). */
export const EXIT_INTERRUPTED = 130;

/** An error meant for the user, with the exit code it stands for. */
export class CliError extends Error {
  readonly exitCode: number;

  constructor(message: string, exitCode: number = EXIT_FAILURE, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}

/** Bad usage: a missing, conflicting or invalid flag (exit 2). */
export function usageError(message: string): CliError {
  return new CliError(message, EXIT_USAGE);
}

/** Options added by {@link addDatabaseOptions}. */
export interface DatabaseOptions {
  readonly databaseUrl?: string;
  readonly schema: string;
}

/** Options added by {@link addLogLevelOption}. */
export interface LogLevelOptions {
  readonly logLevel: string;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/**
 * Adds `--database-url` (default: env DATABASE_URL) and `--schema` (default `outbox`). Every
 * command that takes `--database-url` warns, before it runs, when the URL given there carries a
 * password (visible in `ps`): the one check for all of them (argv-secrets.ts), at `--log-level`.
 */
export function addDatabaseOptions(command: Command, { schema = true } = {}): Command {
  command.option('--database-url <url>', 'PostgreSQL connection URL (default: env DATABASE_URL)');
  command.hook('preAction', (self) => {
    const { databaseUrl: url, logLevel } = self.opts<{ databaseUrl?: string; logLevel?: string }>();
    if (url === undefined) return;
    warnSecretsOnCommandLine({ '--database-url': url }, createLogger(logLevel ?? 'warn'));
  });
  if (schema) {
    command.option('--schema <name>', 'schema holding the outbox tables', schemaName, DEFAULT_SCHEMA);
  }
  return command;
}

/** Adds `--log-level <level>` for the JSON log lines on stderr. */
export function addLogLevelOption(command: Command, fallback: string): Command {
  return command.addOption(
    new Option('--log-level <level>', 'level of the JSON log lines on stderr')
      .choices(LOG_LEVELS)
      .default(fallback),
  );
}

function schemaName(value: string): string {
  try {
    quoteSchema(value);
  } catch (error) {
    throw new InvalidArgumentError(errorMessage(error).replace(/^schema: /, ''));
  }
  return value;
}

/** A commander parser for an integer flag within [min, max]; the error names the accepted range. */
export function integerOption(min: number, max: number = 2 ** 31 - 1): (value: string) => number {
  return (value: string) => {
    const n = Number(value.trim());
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`Expected an integer from ${min} to ${max}.`);
    }
    return n;
  };
}

/** A commander parser for a text flag that must not be empty or blank (an id, a name). */
export function nonEmptyOption(value: string): string {
  if (value.trim() === '') throw new InvalidArgumentError('Expected a non-empty value.');
  return value;
}

/** The database URL from `--database-url`, else env DATABASE_URL; a usage error when neither is set. */
export function databaseUrl(options: { readonly databaseUrl?: string }): string {
  const url = options.databaseUrl ?? process.env['DATABASE_URL'];
  if (url === undefined || url.trim() === '') {
    throw usageError('no database given: pass --database-url <url> or set DATABASE_URL');
  }
  if (!/^(postgres|postgresql|socket):/i.test(url.trim())) {
    const from = options.databaseUrl === undefined ? 'DATABASE_URL' : '--database-url';
    throw usageError(`${from} is not a PostgreSQL URL; expected postgres://user:password@host:5432/database`);
  }
  return url;
}

/** A pool for a command; idle-connection errors are logged instead of crashing the process. */
export function createPool(url: string, logger: PinoLogger, max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max, application_name: 'tx-outbox' });
  pool.on('error', (error) => {
    // pg-pool hangs the whole client on the error (error.client): not something for a log line.
    Reflect.deleteProperty(error, 'client');
    // Once the pool is ending, a connection closed by the server on its way out is no news.
    if (!pool.ending) logger.warn({ err: error }, 'idle database connection failed');
  });
  return pool;
}

/**
 * Pino JSON lines on stderr, written synchronously so nothing is lost on exit. Every URL in
 * a line (in the message, a field, an error's message or stack) has its password and query
 * values masked: a client library's error may quote the address it was given.
 */
export function createLogger(level: string): PinoLogger {
  return pino(
    {
      name: 'tx-outbox',
      level,
      formatters: { log: (record) => redactFields(record) },
      serializers: { err: (error: Error) => redactFields(pino.stdSerializers.err(error), 6) },
      hooks: {
        logMethod(args, method) {
          method.apply(this, args.map((arg) => redactFields(arg)) as Parameters<typeof method>);
        },
      },
    },
    pino.destination({ dest: 2, sync: true }),
  );
}

/** The fields of this package's package.json the CLI reads. */
export interface PackageManifest {
  readonly version?: unknown;
  readonly devDependencies?: Readonly<Record<string, unknown>>;
}

/** This package's package.json, read from beside dist/ (or src/). */
export function packageManifest(): PackageManifest {
  return JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as PackageManifest;
}

/** The package version, from {@link packageManifest}. */
export function packageVersion(): string {
  const version = packageManifest().version;
  return typeof version === 'string' ? version : '0.0.0';
}

/** True when `--verbose` is on the command line (read directly: parsing itself may be what failed). */
export function verboseRequested(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end === -1 ? argv : argv.slice(0, end)).includes('--verbose');
}

/**
 * Prints one line `tx-outbox: <message>` on stderr (plus the stack and causes
 * when verbose) and returns the exit code: 0 for help and version, 2 for bad
 * usage and invalid input, a CliError's own (3: an id not found), 1 for anything else.
 */
export function reportError(error: unknown, verbose: boolean): number {
  if (error instanceof CommanderError) return reportCommanderError(error);
  process.stderr.write(`tx-outbox: ${redactText(oneLine(describe(error)))}\n`);
  if (verbose) process.stderr.write(`${redactText(stackOf(error))}\n`);
  if (error instanceof CliError) return error.exitCode;
  return error instanceof OutboxValidationError ? EXIT_USAGE : EXIT_FAILURE;
}

function reportCommanderError(error: CommanderError): number {
  if (error.code === 'commander.helpDisplayed' || error.code === 'commander.version') return 0;
  // Help was printed: asked for (`help relay`, exit 0), or because no command was given (bad usage).
  if (error.code === 'commander.help') return error.exitCode === 0 ? 0 : EXIT_USAGE;
  const message = error.message.replace(/^error: /, '');
  process.stderr.write(`tx-outbox: ${oneLine(message)} (see --help)\n`);
  return EXIT_USAGE;
}

/** A message for the user: connection failures say so; an empty AggregateError shows its parts. */
function describe(error: unknown): string {
  if (error instanceof AggregateError && error.message === '' && error.errors.length > 0) {
    return describe(error.errors[0]);
  }
  const message = errorMessage(error) || String(error);
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && DATABASE_CONNECT_CODES.has(code)) {
    return `cannot connect to the database: ${message}`;
  }
  return message;
}

function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, ' ').trim();
}

function stackOf(error: unknown): string {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current !== undefined && depth < 5; depth++) {
    parts.push(current instanceof Error ? (current.stack ?? current.message) : String(current));
    current = current instanceof Error ? current.cause : undefined;
    if (current !== undefined) parts.push('Caused by:');
  }
  return parts.join('\n');
}

export { sleep } from '../sleep.js';
