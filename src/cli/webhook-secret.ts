/**
 * Where the relay's webhook signing secret comes from, best first: a file
 * (`--webhook-secret-file`, or `secretFile` in the config), the environment
 * (`TX_OUTBOX_WEBHOOK_SECRET`), or — visible to every user in `ps` and kept in shell
 * history — `--webhook-secret` on the command line, which still works but warns once.
 * The secret itself never reaches a log line or an error message.
 */
import { readFileSync } from 'node:fs';
import { errorMessage } from '../errors.js';
import type { Logger } from '../logger.js';
import { usageError } from './common.js';

export const WEBHOOK_SECRET_ENV = 'TX_OUTBOX_WEBHOOK_SECRET';

export interface WebhookSecretOptions {
  readonly webhookSecret?: string;
  readonly webhookSecretFile?: string;
}

/** The secret from the flags or the environment; undefined when none is given. */
export function webhookSecretFromFlags(
  options: WebhookSecretOptions,
  logger: Logger,
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  if (options.webhookSecret !== undefined && options.webhookSecretFile !== undefined) {
    throw usageError('give --webhook-secret-file or --webhook-secret, not both');
  }
  if (options.webhookSecretFile !== undefined) {
    return readSecretFile(options.webhookSecretFile, '--webhook-secret-file');
  }
  if (options.webhookSecret !== undefined) {
    logger.warn(
      {},
      `--webhook-secret is visible to other users in \`ps\` and stays in shell history; ` +
        `set ${WEBHOOK_SECRET_ENV} or use --webhook-secret-file <path> instead`,
    );
    return options.webhookSecret;
  }
  const fromEnv = env[WEBHOOK_SECRET_ENV];
  return fromEnv === undefined || fromEnv.trim() === '' ? undefined : fromEnv.trim();
}

/** A secret file's content without surrounding whitespace (the newline editors add). */
export function readSecretFile(path: string, what: string): string {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw usageError(`${what}: cannot read ${path} (${errorMessage(error)})`);
  }
  const secret = text.trim();
  if (secret === '') throw usageError(`${what}: ${path} is empty; put the signing secret in it`);
  return secret;
}
