/**
 * One behaviour suite for every relay (the polling relay, the CDC relay in table mode and in WAL
 * mode), on a real PostgreSQL and a real broker, through the public API only: `enqueue`, the
 * relay's start/stop/stats/health, `findEvent`, `listDead`, `replayDead`, `skipDead`.
 * Test-runner agnostic like {@link publisherContract}: pass your runner's `describe`, `it`,
 * `expect`, `beforeAll`, `afterAll` (and `skip`, e.g. vitest's `it.skip`, for the cases a relay
 * declares it cannot honour).
 *
 *   relayContract({ describe, it, expect, beforeAll, afterAll, skip: it.skip }, {
 *     name: 'polling', features: { via: 'table', fence: '…' }, databaseUrl, broker,
 *     create: (options) => createRelay(options), spawn, restartDatabase,
 *   });
 *
 * Each case works in a scratch schema and a broker namespace of its own; the broker is reached
 * through a TcpProxy the suite can cut. The cases: relay-cases-delivery.ts (`order`, `rollback`,
 * `poison`, `history`) and relay-cases-faults.ts (`outage`, `fencing`, `stop`, `kill`,
 * `restart`); docs/guarantees.md, The relay contract.
 */

import { deliveryCases } from './relay-cases-delivery.js';
import { faultCases } from './relay-cases-faults.js';
import { caseKit, type RelayTestApi } from './relay-checks.js';
import type { RelayUnderTest } from './relay-scenario.js';
import { TcpProxy } from './tcp-proxy.js';

export type { RelayTestApi } from './relay-checks.js';
export type {
  ChildMode,
  ChildRelayConfig,
  ChildReport,
  CommitMark,
  ContractRelay,
  RelayBroker,
  RelayCase,
  RelayChild,
  RelayFeatures,
  RelayUnderTest,
  SeenMessage,
} from './relay-scenario.js';
export { RELAY_CASES } from './relay-scenario.js';

export function relayContract(api: RelayTestApi, subject: RelayUnderTest): void {
  const { describe, beforeAll, afterAll } = api;
  let proxy: TcpProxy | undefined;
  const kit = caseKit(api, subject, () => {
    if (!proxy) throw new Error('relay contract: the broker proxy is not started (beforeAll did not run)');
    return proxy;
  });

  describe(`relay contract: ${subject.name}`, () => {
    beforeAll(async () => {
      proxy = await TcpProxy.start(subject.broker.address);
    });
    afterAll(async () => {
      await proxy?.close();
    });
    deliveryCases(kit);
    faultCases(kit);
  });
}
