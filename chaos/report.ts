/** The run's result as JSON and markdown, with one PASS/FAIL line. */
import type { BrokerKind } from './brokers.js';
import type { ProducerMode } from './cdc.js';
import type { FaultRecord } from './faults.js';
import type { LatencySummary } from './metrics.js';
import type { Profile } from './profiles.js';
import { ALL_FAULT_KINDS, FAULT_KINDS, type FaultKind, type RelayKind } from './schedule.js';
import type { UnexpectedExit } from './supervisor.js';
import type { Invariant } from './truth.js';

export interface RunResult {
  readonly profile: Profile;
  readonly broker: BrokerKind;
  readonly relay: RelayKind;
  readonly producers: ProducerMode;
  readonly seed: number;
  readonly startedAt: string;
  readonly wallSeconds: number;
  readonly producingSeconds: number;
  readonly drain: { readonly seconds: number; readonly complete: boolean };
  readonly faults: readonly (FaultRecord & { readonly recoveryMs: number })[];
  readonly events: {
    readonly committed: number;
    readonly rolledBack: number;
    readonly failedTransactions: number;
    readonly effects: number;
  };
  readonly duplicates: {
    /** Messages the broker stored beyond one per committed event. */
    readonly wire: number;
    readonly storedMessages: number;
    /** Deliveries the inbox answered `duplicate` (counted by the consumers; a kill -9 loses its last second). */
    readonly consumer: number;
    readonly deliveries: number;
    readonly deferred: number;
  };
  readonly latency: {
    readonly overall: LatencySummary;
    readonly duringFaults: LatencySummary;
    readonly outsideFaults: LatencySummary;
  };
  readonly starts: Readonly<Record<string, number>>;
  readonly relayStats: Readonly<Record<string, number>>;
  readonly unexpectedExits: readonly UnexpectedExit[];
  readonly invariants: readonly Invariant[];
  readonly pass: boolean;
}

const n = (x: number): string => x.toLocaleString('en-US');
const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

export function faultsByKind(
  faults: readonly FaultRecord[],
): Record<FaultKind, { count: number; applied: number }> {
  const out = Object.fromEntries(ALL_FAULT_KINDS.map((k) => [k, { count: 0, applied: 0 }])) as Record<
    FaultKind,
    { count: number; applied: number }
  >;
  for (const f of faults) {
    out[f.kind].count++;
    if (f.applied) out[f.kind].applied++;
  }
  return out;
}

export function resultLine(r: RunResult): string {
  const get = (prefix: string): number => r.invariants.find((i) => i.name.startsWith(prefix))?.value ?? -1;
  return (
    `RESULT: ${r.pass ? 'PASS' : 'FAIL'} — ${r.profile.name} ${relayWords(r)}${r.broker} seed ${r.seed}: ` +
    `${n(r.events.committed)} events committed (${n(r.events.rolledBack)} rolled back), ` +
    `${r.faults.length} faults, ${get('lost')} lost, ${get('phantom')} phantom, ` +
    `${get('applied more')} extra effects, ${get('applied out')} out of order, ` +
    `${get('outbox dead')} dead, ${get('inbox quar')} quarantined, ` +
    `${r.unexpectedExits.length} unexpected exits; duplicates: ${n(r.duplicates.wire)} on the wire, ` +
    `${n(r.duplicates.consumer)} at the consumer`
  );
}

/** '' for the polling relay (its lines read as they always did), else `cdc (mixed producers) `. */
function relayWords(r: RunResult): string {
  return r.relay === 'cdc' ? `cdc (${r.producers} producers) ` : '';
}

/** The command that reproduces the run's schedule. */
export function command(r: RunResult): string {
  const cdc = r.relay === 'cdc' ? ` --relay cdc --producers ${r.producers}` : '';
  return `npm run chaos -- --profile ${r.profile.name} --broker ${r.broker}${cdc} --seed ${r.seed}`;
}

function producersWords(mode: ProducerMode): string {
  if (mode === 'mixed') return 'table mode and WAL mode, alternately';
  return mode === 'wal' ? "WAL mode (`enqueue(…, { via: 'wal' })`)" : 'table mode';
}

function relayProcesses(relay: RelayKind): string {
  return relay === 'cdc'
    ? '`createCdcRelay`, default settings: one streams, the others stand by; the replication connection on a fault proxy link of its own'
    : '`createRelay`, default settings';
}

function cdcSection(r: RunResult): string[] {
  if (r.relay !== 'cdc') return [];
  const takeovers = r.faults.filter((f) => f.kind === 'takeover' && f.applied);
  const times = takeovers
    .map((f) => f.takeoverMs)
    .filter((t): t is number => t !== undefined)
    .sort((a, b) => a - b);
  const quiets = r.faults.filter((f) => f.kind === 'quiet' && f.quiet);
  const kb = (b: number): string => `${n(Math.round(b / 1024))} KiB`;
  return [
    '## CDC',
    '',
    `Relay counters (every incarnation): ${n(r.relayStats.reconnects ?? 0)} stream reconnects, ` +
      `${n(r.relayStats.handovers ?? 0)} events handed over to the polling path, ` +
      `${n(r.relayStats.refusedMessages ?? 0)} WAL-mode messages refused.`,
    '',
    `Standby takeovers (the streaming relay killed -9 and held down): ${takeovers.length}, ` +
      `${times.length} taken over by a standby` +
      (times.length > 0
        ? `, after ${s(times[0] ?? 0)} to ${s(times[times.length - 1] ?? 0)} (median ${s(times[Math.floor(times.length / 2)] ?? 0)})`
        : '') +
      '.',
    '',
    'Quiet periods (producers paused; the heartbeat alone must move the slot):',
    '',
    '| # | settled in | confirmed moved | steps | unconfirmed at end | retained start → end | |',
    '|---:|---:|---:|---:|---:|---:|---|',
    ...quiets.map((f) => {
      const q = f.quiet!;
      return (
        `| ${f.index} | ${q.settleS} s | ${kb(q.advancedBytes)} | ${q.advances} | ${kb(q.lagBytesAtEnd)} | ` +
        `${kb(q.retainedBytesAtStart)} → ${kb(q.retainedBytesAtEnd)} | ${q.ok ? 'ok' : `**${q.problem}**`} |`
      );
    }),
    '',
  ];
}

function latencyRow(name: string, l: LatencySummary): string {
  return `| ${name} | ${n(l.events)} | ${l.p50Ms} ms | ${l.p99Ms} ms | ${l.maxMs} ms |`;
}

export function markdown(r: RunResult): string {
  const byKind = faultsByKind(r.faults);
  const recoveries = r.faults.map((f) => f.recoveryMs).sort((a, b) => a - b);
  const q = (p: number): number =>
    recoveries[Math.min(recoveries.length - 1, Math.floor(p * recoveries.length))] ?? 0;
  const lines = [
    `# Chaos run: ${r.profile.name} profile, ${relayWords(r)}${r.broker}`,
    '',
    `**${resultLine(r)}**`,
    '',
    `Started ${r.startedAt}, ${s(r.wallSeconds * 1000)} wall (producing ${s(r.producingSeconds * 1000)}, ` +
      `drain ${s(r.drain.seconds * 1000)}${r.drain.complete ? '' : ', NOT complete within its bound'}). ` +
      `Reproduce the schedule: \`${command(r)}\`.`,
    '',
    '## Settings',
    '',
    `${r.profile.producers} producers${r.relay === 'cdc' ? ` in ${producersWords(r.producers)}` : ''} (${r.profile.eventsPerSecond} events/s together, 1–${r.profile.maxEventsPerTransaction} events per transaction, ` +
      `${Math.round(r.profile.rollbackShare * 100)} % of transactions rolled back on purpose, ${n(r.profile.aggregates)} aggregates), ` +
      `${r.profile.relays} relay processes (${relayProcesses(r.relay)}), ${r.profile.consumers} inbox consumer process(es) ` +
      `(\`consume${r.broker === 'nats' ? 'Nats' : 'Kafka'}\` + \`createInbox\` strict ordering, default settings), ` +
      'each reaching PostgreSQL and the broker through a fault proxy; a private PostgreSQL 15 and a private broker.',
    '',
    '## Faults',
    '',
    '| kind | count | applied |',
    '|---|---:|---:|',
    ...(r.relay === 'cdc' ? ALL_FAULT_KINDS : FAULT_KINDS).map(
      (k) => `| ${k} | ${byKind[k].count} | ${byKind[k].applied} |`,
    ),
    `| **total** | **${r.faults.length}** | **${r.faults.filter((f) => f.applied).length}** |`,
    '',
    '"applied" excludes faults whose target process was down at that moment (between a kill and its restart)' +
      (r.relay === 'cdc' ? ', and takeovers and replication faults while no relay streamed.' : '.'),
    '',
    ...cdcSection(r),
    '## Events and duplicates',
    '',
    '| | |',
    '|---|---:|',
    `| events committed (ground truth: business rows) | ${n(r.events.committed)} |`,
    `| events rolled back on purpose | ${n(r.events.rolledBack)} |`,
    `| producer transactions failed by a fault | ${n(r.events.failedTransactions)} |`,
    `| effects applied | ${n(r.events.effects)} |`,
    `| messages stored by the broker | ${n(r.duplicates.storedMessages)} |`,
    `| duplicates on the wire (stored − committed) | ${n(r.duplicates.wire)} |`,
    `| deliveries handled by the inbox | ${n(r.duplicates.deliveries)} |`,
    `| duplicates at the consumer (answered \`duplicate\`) | ${n(r.duplicates.consumer)} |`,
    `| deferrals (arrived before their predecessor) | ${n(r.duplicates.deferred)} |`,
    '',
    '## Commit → apply latency',
    '',
    '| events | count | p50 | p99 | max |',
    '|---|---:|---:|---:|---:|',
    latencyRow('all', r.latency.overall),
    latencyRow('committed during a fault or its recovery', r.latency.duringFaults),
    latencyRow('committed outside faults', r.latency.outsideFaults),
    '',
    '## Recovery',
    '',
    'Recovery time of a fault: from its end until every event committed before that end was applied.',
    `Median ${s(q(0.5))}, p90 ${s(q(0.9))}, max ${s(q(1))}.`,
    '',
    '## Invariants',
    '',
    '| invariant | value | |',
    '|---|---:|---|',
    ...r.invariants.map((i) => `| ${i.name} | ${n(i.value)} | ${i.ok ? 'ok' : '**VIOLATED**'} |`),
    `| components that exited by themselves | ${r.unexpectedExits.length} | ${r.unexpectedExits.length === 0 ? 'ok' : '**VIOLATED**'} |`,
    '',
  ];
  const violated = r.invariants.filter((i) => !i.ok);
  if (violated.length > 0) {
    lines.push('### Examples', '');
    for (const i of violated) lines.push(`- ${i.name}:`, ...i.examples.map((e) => `  - \`${e}\``));
    lines.push('');
  }
  if (r.unexpectedExits.length > 0) {
    lines.push('### Exits nobody asked for', '');
    for (const e of r.unexpectedExits.slice(0, 10)) {
      lines.push(
        `- ${e.name} at ${new Date(e.at).toISOString()}, code ${e.code}, signal ${e.signal}; last lines:`,
        '',
        '```',
        ...e.tail.map((l) => l.slice(0, 400)),
        '```',
        '',
      );
    }
  }
  lines.push(
    '## Fault log',
    '',
    '| # | at | kind | target | duration | applied | recovery |',
    '|---:|---:|---|---|---:|---|---:|',
    ...r.faults.map(
      (f) =>
        `| ${f.index} | ${s(f.startedMs - (r.faults[0]?.startedMs ?? f.startedMs))} | ${f.kind} | ${f.target} | ` +
        `${f.durationS !== undefined ? `${f.durationS} s` : ''}${f.latencyMs !== undefined ? ` +${f.latencyMs} ms` : ''} | ` +
        `${f.applied ? 'yes' : `no${f.error ? ` (${f.error.slice(0, 80)})` : ''}`} | ${s(f.recoveryMs)} |`,
    ),
    '',
  );
  return lines.join('\n');
}
