/**
 * Idle CPU: what a relay costs while there is nothing to deliver. One relay process on an empty,
 * migrated outbox (tx-outbox's bench/relay-process.mjs as W1 runs it, or the lean reference
 * relay); after `settleSeconds` (2 s: partitions taken, the relay gone to sleep) the CPU of the
 * relay process and of its PostgreSQL backends (by application_name, bench/cpu.ts) is read over
 * `seconds`, as % of one core. NATS is read too (it has nothing to do but answer heartbeats).
 */
import type pg from 'pg';
import { migrate } from '../../src/index.js';
import { CpuMeter } from '../cpu.js';
import { benchContext } from '../lib.js';
import { hasExited, type RelayChild, stopRelay, whenStarted } from '../systems/child.js';
import { leanCpuMeter, spawnLeanRelay } from '../systems/lean-relay.js';
import { applicationNameOf, spawnRelay } from '../systems/tx-outbox.js';

export type IdleRelay = 'tx-outbox' | 'lean';

/** % of one core over the measured seconds, by process; undefined where it could not be read. */
export interface IdleCpu {
  readonly relay?: number;
  readonly postgres?: number;
  readonly nats?: number;
  readonly seconds: number;
}

export async function idleCpuRun(
  pool: pg.Pool,
  options: { relay: IdleRelay; seconds: number; settleSeconds?: number },
): Promise<IdleCpu> {
  const ctx = await benchContext(pool);
  let relay: RelayChild | undefined;
  try {
    await migrate(ctx.pool, { schema: ctx.schema });
    let cpu: CpuMeter;
    if (options.relay === 'lean') {
      relay = spawnLeanRelay(ctx);
      await whenStarted(relay);
      cpu = leanCpuMeter(ctx, [relay]);
    } else {
      // The relay as a user runs it: the library's default lease (15 s; W1's processes use 5 s).
      relay = spawnRelay(ctx, 0, 1000, undefined, undefined, { leaseMs: 15_000 });
      await whenStarted(relay);
      cpu = new CpuMeter(ctx.pool, {
        relayPids: [relay.child.pid!],
        applicationName: applicationNameOf(ctx),
      });
    }
    await new Promise((r) => setTimeout(r, (options.settleSeconds ?? 2) * 1000));
    await cpu.sample();
    const started = performance.now();
    const until = started + options.seconds * 1000;
    while (performance.now() < until) {
      await new Promise((r) => setTimeout(r, Math.min(500, until - performance.now())));
      await cpu.sample();
    }
    const seconds = (performance.now() - started) / 1000;
    if (hasExited(relay)) {
      throw new Error(`the relay process exited (${relay.child.exitCode ?? relay.child.signalCode})`);
    }
    // per1000(1000): the CPU ms of each process over the whole measured part.
    const ms = cpu.per1000(1000);
    const percent = (v: number | undefined): number | undefined =>
      v === undefined ? undefined : (v / (seconds * 1000)) * 100;
    const used = { relay: percent(ms.relay), postgres: percent(ms.postgres), nats: percent(ms.nats) };
    return {
      seconds,
      ...(used.relay === undefined ? {} : { relay: used.relay }),
      ...(used.postgres === undefined ? {} : { postgres: used.postgres }),
      ...(used.nats === undefined ? {} : { nats: used.nats }),
    };
  } finally {
    if (relay) await stopRelay(relay).catch(() => relay?.child.kill('SIGKILL'));
    await ctx.close();
  }
}
