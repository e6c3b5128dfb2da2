/** `tx-outbox event <event-id> [--json]`: where one event is (pending, dead, published, …). */

import type { Command } from 'commander';
import { type EventLocation, type EventWait, findEvent } from '../ops/find-event.js';
import { type DatabaseCommandOptions, withDatabaseOptions, withPool } from './command.js';
import { EXIT_NOT_FOUND } from './common.js';

interface EventCliOptions extends DatabaseCommandOptions {
  readonly json?: boolean;
}

/** Registers `tx-outbox event <event-id> [--json]`. */
export function registerEvent(program: Command): void {
  const command = program
    .command('event <eventId>')
    .description(
      'where an event is: pending (and what it waits for), dead, published (delivery history), replayed or skipped',
    )
    .option('--json', 'print JSON');
  withDatabaseOptions(command);
  command.action((eventId: string, options: EventCliOptions) => runEvent(eventId, options));
}

async function runEvent(eventId: string, options: EventCliOptions): Promise<void> {
  await withPool(options, 1, async (pool) => {
    const location = await findEvent(pool, eventId, { schema: options.schema });
    process.stdout.write(
      `${options.json ? JSON.stringify({ eventId: eventId.toLowerCase(), ...location }) : formatEvent(eventId.toLowerCase(), location)}\n`,
    );
    // Found (in whatever state): 0. Not found anywhere: 3, so a script can tell.
    if (location.state === 'unknown') process.exitCode = EXIT_NOT_FOUND;
  });
}

const at = (d: Date): string => d.toISOString();

/** The human answer, a few lines. */
export function formatEvent(eventId: string, l: EventLocation): string {
  const lines: string[] = [];
  if (l.state === 'pending' || l.state === 'dead' || l.state === 'published') {
    const e = l.event;
    lines.push(
      `Event ${eventId}: ${l.state}`,
      `  ${e.aggregateType}/${e.aggregateId} #${e.sequence}  ${e.type}${e.topic ? `  topic ${e.topic}` : ''}  partition ${e.partition}`,
      `  created ${at(e.createdAt)}`,
    );
  }
  switch (l.state) {
    case 'pending':
      lines.push(`  attempts ${l.attempts}${l.attempts > 0 ? `, next attempt ${at(l.nextAttemptAt)}` : ''}`);
      if (l.lastError) lines.push(`  last error: ${l.lastError}`);
      lines.push('  waiting for:', ...l.waitingFor.map((w) => `    - ${describeWait(w, l.event)}`));
      break;
    case 'dead':
      lines.push(
        `  dead since ${l.deadAt ? at(l.deadAt) : '?'} after ${l.attempts} attempt${l.attempts === 1 ? '' : 's'}`,
        `  last error: ${l.lastError ?? '(none)'}`,
        l.blocking > 0
          ? `  holds back ${l.blocking} later event${l.blocking === 1 ? '' : 's'} of ${l.event.aggregateType}/${l.event.aggregateId}: replay or skip it (tx-outbox dead replay|skip ${eventId} --reason …)`
          : `  replay or skip it: tx-outbox dead replay|skip ${eventId} --reason …`,
      );
      break;
    case 'published':
      lines.push(
        `  published ${at(l.publishedAt)} by relay ${l.relayId} to ${l.publisher}, after ${l.attempts} attempt${l.attempts === 1 ? '' : 's'}`,
      );
      if (l.deliveries.length > 1) {
        lines.push(
          `  published ${l.deliveries.length} times (at-least-once: a lease changed hands mid-batch):`,
          ...l.deliveries.map((d) => `    - ${at(d.publishedAt)} by ${d.relayId} to ${d.publisher}`),
        );
      }
      break;
    case 'skipped':
    case 'replayed':
      lines.push(
        `Event ${eventId}: ${l.state} — no longer in the outbox, not in the delivery history`,
        l.state === 'replayed'
          ? '  it was replayed and has since been published (with history off, or before the history reaches back)'
          : '  it was resolved without being published',
      );
      break;
    case 'unknown': {
      const h = l.history;
      const why = !h.present
        ? 'the schema has no delivery history (migrate to version 5, run the relay with --history)'
        : h.empty
          ? 'the delivery history is empty: it is off (run the relay with --history, or createRelay({ history }))'
          : `the delivery history reaches back to ${h.oldestDay ?? 'its oldest partition'}: the event is older, or was published while history was off, or the id is wrong`;
      lines.push(
        `Event ${eventId}: unknown — not in the outbox, not in the delivery history, not audited`,
        `  ${why}`,
      );
      break;
    }
  }
  if (l.audit.length > 0) {
    lines.push('  audit:', ...l.audit.map((a) => `    - ${at(a.at)} ${a.action} by ${a.actor}: ${a.reason}`));
  }
  return lines.join('\n');
}

function describeWait(w: EventWait, e: { aggregateType: string; aggregateId: string }): string {
  const aggregate = `${e.aggregateType}/${e.aggregateId}`;
  switch (w.kind) {
    case 'deliver-after':
      return `its deliverAfter, ${at(w.until)} (in the future)`;
    case 'backoff':
      return `its retry: backing off until ${at(w.until)}`;
    case 'behind': {
      const more = w.earlier > 1 ? ` (and ${w.earlier - 1} more after it)` : '';
      const head =
        w.status === 'dead'
          ? `dead since ${w.since ? at(w.since) : '?'} after ${w.attempts} attempts${w.lastError ? `: ${w.lastError}` : ''} — replay or skip ${w.eventId}`
          : `pending, ${w.attempts > 0 ? `attempt ${w.attempts + 1} at ${at(w.nextAttemptAt)}` : 'not yet published'} (event ${w.eventId})`;
      return `held behind sequence ${w.sequence} of ${aggregate}${more}, ${head}`;
    }
    case 'aggregate-blocked':
      return w.until === 'dead'
        ? `its aggregate ${aggregate} is blocked by a dead event`
        : `its aggregate ${aggregate} is blocked until ${at(w.until)}`;
    case 'gap':
      return `sequences ${w.deliveredSequence + 1}… of ${aggregate} are neither delivered nor in the outbox (delivered up to ${w.deliveredSequence}); the relay publishes across the gap once it has waited gapGraceMs`;
    case 'no-owner':
      return `its partition ${w.partition} has no owner: no relay holds it under a live lease (is a relay running?)`;
    case 'due':
      return 'nothing: it is due, the next claim of its partition takes it';
  }
}
