/** Physical ceiling (b) as a drain system: the broker-only publish loop, no database (nothing to load). */
import { type BrokerCeilingMode, brokerCeiling } from './broker-ceiling.js';
import type { DrainSystem } from './types.js';

export function brokerCeilingSystem(mode: BrokerCeilingMode): DrainSystem {
  return {
    name: `broker-only ${mode} publish loop`,
    async load() {},
    async drain(ctx, workload) {
      const result = await brokerCeiling(ctx, {
        messages: workload.events,
        payloadBytes: workload.payloadBytes,
        aggregates: workload.aggregates,
        mode,
      });
      return { seconds: result.seconds, delivered: workload.events };
    },
    async teardown() {},
  };
}
