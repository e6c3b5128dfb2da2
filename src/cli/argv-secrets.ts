/**
 * Addresses given on the command line are visible to every user in `ps` and stay in shell
 * history; a relay runs for days. When an address flag carries a password, a user name
 * (often a token) or a query value, the relay warns once per flag — naming the flag, never
 * the value — and says where the address can go instead. It still works.
 */
import type { Logger } from '../logger.js';

/** Where each flag's address can be given off the command line. */
const INSTEAD: Readonly<Record<string, string>> = {
  '--database-url': 'set DATABASE_URL instead',
};
const PUBLISHER_INSTEAD = 'describe the publisher in a --config file instead';

/** Warns for each flag (name → value as given, comma-separated lists too) whose address holds a secret. */
export function warnSecretsOnCommandLine(
  flags: Readonly<Record<string, string | undefined>>,
  logger: Logger,
): void {
  for (const [flag, value] of Object.entries(flags)) {
    if (value === undefined || !value.split(',').some(carriesSecret)) continue;
    logger.warn(
      { flag },
      `${flag} carries a password or token, visible to other users in \`ps\` and kept in shell ` +
        `history; ${INSTEAD[flag] ?? PUBLISHER_INSTEAD}`,
    );
  }
}

function carriesSecret(address: string): boolean {
  const text = address.trim();
  // `user:pass@host:4222`, as NATS takes it.
  if (!text.includes('://')) return text.includes('@');
  try {
    const url = new URL(text);
    return url.username !== '' || url.password !== '' || url.search.length > 1;
  } catch {
    return /[@?]/.test(text);
  }
}
