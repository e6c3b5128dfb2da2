import type { Claimed } from '../claim/claim.js';
import { type RelayOptions, resolveRelayOptions } from '../options.js';
import type { Relay } from '../relay.js';
import { RelayRuntime } from '../runtime.js';
import { PollingSource } from './source.js';

export type { Relay, RelayHealth, RelayStats, Timing } from '../relay.js';

/** Creates a polling relay: leased partitions, ordering gate, backoff, dead events. */
export function createRelay(options: RelayOptions): Relay {
  return new RelayRuntime<Claimed>({
    o: resolveRelayOptions(options),
    kind: 'relay',
    source: (context) => new PollingSource(context),
  });
}
