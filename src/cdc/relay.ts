import type { Relay } from '../relay/relay.js';
import { RelayRuntime } from '../relay/runtime.js';
import type { RelayStats } from '../relay/stats.js';
import { type CdcRelayOptions, resolveCdcRelayOptions } from './options.js';
import type { CdcStats } from './stats.js';
import { type StreamBatch, StreamSource } from './stream-source.js';

export type { CdcRelayOptions } from './options.js';
export type { CdcStats } from './stats.js';

/** A CDC relay: the polling relay's interface, its stats with the stream's. */
export interface CdcRelay extends Relay {
  stats(): RelayStats & { cdc: CdcStats };
}

/**
 * Creates a CDC relay: the relay runtime over the CDC stream source ({@link StreamSource}),
 * which holds every partition lease (the fence), streams the slot's inserts into the events
 * table and WAL-mode messages, publishes them in per-aggregate order, and confirms the slot
 * past what is settled; aggregates with a failure or a scheduled event, and rows left in the
 * table at start that will not stream again, go to the hand-over source beside it.
 */
export function createCdcRelay(options: CdcRelayOptions): CdcRelay {
  const o = resolveCdcRelayOptions(options);
  const runtime = new RelayRuntime<StreamBatch>({
    o: o.base,
    kind: 'CDC relay',
    leases: { exclusive: true },
    source: (context) => new StreamSource(context, o),
  });
  const source = runtime.source as StreamSource;
  return {
    id: runtime.id,
    start: () => runtime.start(),
    stop: (stop) => runtime.stop(stop),
    wake: () => runtime.wake(),
    health: () => runtime.health(),
    stats: () => ({ ...runtime.stats(), cdc: source.stats() }),
  };
}
