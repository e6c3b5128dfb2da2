/**
 * What the three relay contract files share: the broker (NATS JetStream on the shared server,
 * a stream per namespace, read back by a core subscription that sees every publish, duplicates
 * included), a private PostgreSQL per file (the `restart` case restarts it), and a relay child
 * (test/contract/fixtures/relay-child.ts, run from the sources) for `kill` and `fencing`.
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { percentDecode } from '../../src/envelope/percent.js';
import { cdcSlotStatus, createCdcRelay, dropCdcSlot, ensureCdcSlot } from '../../src/index.js';
import { natsPublisher } from '../../src/publishers/nats/index.js';
import { createRelay } from '../../src/relay/polling/relay.js';
import {
  type ChildRelayConfig,
  type ChildReport,
  type RelayBroker,
  type RelayChild,
  type RelayFeatures,
  type RelayUnderTest,
  readChildReports,
} from '../../src/testing/index.js';
import { NATS_URL } from '../helpers/env.js';
import { exited } from '../helpers/processes.js';

const CHILD = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'relay-child.ts');
const natsUrl = new URL(NATS_URL);
const streamOf = (namespace: string) => `TXO_RC_${namespace}`;

export type RelayKind = 'polling' | 'cdc';

/** The CDC relay's own options the contract runs it with: a quick heartbeat and watchdog. */
export const CDC_OPTIONS = { heartbeatMs: 1000, silenceTimeoutMs: 5000, statusIntervalMs: 200 } as const;

export const natsBroker: RelayBroker = {
  address: { host: natsUrl.hostname, port: Number(natsUrl.port || 4222) },
  publisher: (address, namespace) =>
    natsPublisher({
      url: `nats://${address.host}:${address.port}`,
      stream: streamOf(namespace),
      streamSubjects: [`${namespace}.>`],
      timeoutMs: 1000,
      // Reconnect through the proxy only: do not follow the server's advertised URLs.
      clientOptions: { ignoreClusterUpdates: true, reconnectTimeWait: 100, maxReconnectAttempts: -1 },
    }),
  topic: (namespace) => `${namespace}.events`,
  async watch(namespace) {
    const nc = await connect({ servers: NATS_URL });
    const seen: Array<{ eventId: string; aggregateId: string; sequence: number; type: string }> = [];
    const sub = nc.subscribe(`${namespace}.>`);
    void (async () => {
      for await (const m of sub) {
        // A JetStream API reply or anything without our headers is no publish of the relay.
        const id = m.headers?.get('Nats-Msg-Id');
        if (!id) continue;
        seen.push({
          eventId: id,
          aggregateId: percentDecode(m.headers!.get('ce-aggregateid')),
          sequence: Number(m.headers!.get('ce-aggregatesequence')),
          type: percentDecode(m.headers!.get('ce-type')),
        });
      }
    })();
    await nc.flush();
    return { seen, close: () => nc.drain() };
  },
  async cleanup(namespace) {
    const nc = await connect({ servers: NATS_URL });
    try {
      await (await jetstreamManager(nc)).streams.delete(streamOf(namespace)).catch(() => undefined);
    } finally {
      await nc.close();
    }
  },
};

/** An LSN as PostgreSQL prints it (`16/B374D848`) as a number; none is 0. */
function lsnValue(lsn: string | null): bigint {
  if (lsn === null) return 0n;
  const [high, low] = lsn.split('/');
  return (BigInt(`0x${high}`) << 32n) | BigInt(`0x${low}`);
}

/** A relay of `kind` in a child process, running the sources through tsx. */
function spawnChild(kind: RelayKind, config: ChildRelayConfig): RelayChild {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
    env: { ...process.env, TXO_FIXTURE: JSON.stringify({ ...config, kind, nats: NATS_URL }) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => {
    stdout += c.toString();
  });
  child.stderr!.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const done = exited(child).then(() => ({
    code: child.exitCode,
    signal: child.signalCode as string | null,
  }));
  let gone = false;
  void done.then(() => {
    gone = true;
  });
  return {
    reports: () => readChildReports(stdout),
    async until(event, timeoutMs = 20_000): Promise<ChildReport> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = readChildReports(stdout).find((r) => r.event === event);
        if (found) return found;
        if (gone || Date.now() > deadline)
          throw new Error(
            `relay child ${config.relayId}: no '${event}' (${gone ? 'exited' : 'timed out'})\n${stdout.slice(-3000)}\n${stderr.slice(-3000)}`,
          );
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    pause: () => void child.kill('SIGSTOP'),
    resume: () => void child.kill('SIGCONT'),
    async kill() {
      if (gone) return;
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await done;
    },
    exited: () => done,
  };
}

/** The subject for `kind` on `databaseUrl` (a private server, restarted by `restart`). */
export function relaySubject(
  kind: RelayKind,
  name: string,
  features: RelayFeatures,
  databaseUrl: string,
  restart: (mode: 'fast' | 'immediate') => Promise<void>,
): RelayUnderTest {
  return {
    name,
    features,
    databaseUrl,
    restartDatabase: restart,
    broker: natsBroker,
    timeoutMs: 60_000,
    create: (options) =>
      kind === 'cdc' ? createCdcRelay({ ...options, ...CDC_OPTIONS }) : createRelay(options),
    spawn: (config) => spawnChild(kind, config),
    ...(kind === 'cdc'
      ? {
          prepare: async (pool, schema) => {
            await ensureCdcSlot(pool, { schema });
          },
          // The slot's confirmed position: what a CDC relay records as delivered.
          recorded: async (pool, schema, commits) => {
            const confirmed = lsnValue((await cdcSlotStatus(pool, { schema })).confirmedLsn);
            return new Set(commits.filter((c) => c.walLsn <= confirmed).flatMap((c) => c.ids));
          },
          cleanup: async (pool, schema) => {
            await dropCdcSlot(pool, { schema, terminate: true });
          },
        }
      : {}),
  };
}
