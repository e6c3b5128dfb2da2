/**
 * Addresses given on the command line are visible to every user in `ps` and stay in shell
 * history; a relay runs for days. When an address flag carries a password, a query value
 * named like a secret (`?password=`, `?token=`, `?api_key=` …) or, for NATS, a user name alone
 * (NATS URLs put a token there: `nats://<token>@host`), the command warns once per flag — naming
 * the flag, never the value — and says where the address can go instead. It still works. A
 * user name alone elsewhere (`postgres://postgres@host/db`) is no secret. `--database-url` is
 * checked for every command that takes it (common.ts, addDatabaseOptions); the relay checks its
 * publisher flags.
 */
import type { Logger } from '../logger.js';

/** Where each flag's address can be given off the command line. */
const INSTEAD: Readonly<Record<string, string>> = {
  '--database-url':
    'set DATABASE_URL instead, or leave the password out of the URL and give it in PGPASSWORD or ~/.pgpass',
};
const PUBLISHER_INSTEAD = 'describe the publisher in a --config file instead';

/** Warns for each flag (name → value as given, comma-separated lists too) whose address holds a secret. */
export function warnSecretsOnCommandLine(
  flags: Readonly<Record<string, string | undefined>>,
  logger: Logger,
): void {
  for (const [flag, value] of Object.entries(flags)) {
    const tokenUser = flag === '--nats';
    if (value === undefined || !value.split(',').some((address) => carriesSecret(address, tokenUser)))
      continue;
    logger.warn(
      { flag },
      `${flag} carries a password or token, visible to other users in \`ps\` and kept in shell ` +
        `history; ${INSTEAD[flag] ?? PUBLISHER_INSTEAD}`,
    );
  }
}

/**
 * Query parameter names whose value is a credential (libpq's `password` and `sslpassword`,
 * `access_token`, `api_key`, `sig` …), not a file path like libpq's `sslkey`.
 */
const SECRET_PARAMETER = /pass|pwd|secret|token|^key$|api_?key|access_?key|auth|sig|cred/i;
/** The same, for an address `new URL` cannot parse. */
const SECRET_TEXT =
  /:[^@/]*@|[?&](?:[^=&]*(?:pass|pwd|secret|token|api_?key|access_?key|auth|sig|cred)|key=)/i;

function carriesSecret(address: string, tokenUser: boolean): boolean {
  const text = address.trim();
  // `user:pass@host:4222` or `token@host`, as NATS takes it.
  if (!text.includes('://')) return tokenUser ? text.includes('@') : /^[^@/]*:[^@/]*@/.test(text);
  try {
    const url = new URL(text);
    if (url.password !== '' || (tokenUser && url.username !== '')) return true;
    for (const name of url.searchParams.keys()) if (SECRET_PARAMETER.test(name)) return true;
    return false;
  } catch {
    return SECRET_TEXT.test(text);
  }
}
