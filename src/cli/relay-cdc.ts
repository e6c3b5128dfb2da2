/**
 * `tx-outbox relay --source cdc`: the one place the CLI reaches the CDC relay (src/cdc/relay.ts).
 * Loaded on demand, so a build without it still runs every other command, and says what is
 * missing instead of failing to load.
 */

import type { ClientConfig } from 'pg';
import type { RelayOptions } from '../relay/options.js';
import type { Relay } from '../relay/relay.js';
import { CliError } from './common.js';

/** What the CLI passes; the contract's CdcRelayOptions (RelayOptions plus the CDC settings). */
export interface CliCdcRelayOptions extends RelayOptions {
  readonly slot?: string;
  readonly publication?: string;
  readonly heartbeatMs?: number;
  readonly silenceTimeoutMs?: number;
  readonly acceptWalFormat1?: boolean;
  readonly connection?: ClientConfig;
}

interface CdcRelayModule {
  createCdcRelay(options: CliCdcRelayOptions): Relay;
}

// A variable, not a literal: the CLI type-checks and builds without the module.
const CDC_RELAY_MODULE = '../cdc/relay.js';

/** Creates (not starts) the CDC relay; a CliError when this build has none. */
export async function startCdcRelay(options: CliCdcRelayOptions): Promise<Relay> {
  let loaded: CdcRelayModule;
  try {
    loaded = (await import(CDC_RELAY_MODULE)) as CdcRelayModule;
  } catch (error) {
    const missing = error as { code?: string; message?: string };
    // Only the module itself: a missing dependency of it is a real error, reported as it is.
    if (missing.code !== 'ERR_MODULE_NOT_FOUND' || !missing.message?.includes('cdc/relay.js')) throw error;
    throw new CliError(
      'this build of tx-outbox has no CDC relay (src/cdc/relay.ts): run the polling relay (--source poll)',
      1,
      { cause: error },
    );
  }
  return loaded.createCdcRelay(options);
}
