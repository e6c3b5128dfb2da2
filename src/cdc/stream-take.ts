import type { Pool } from 'pg';
import type { Logger } from '../logger.js';
import type { RefusedAggregates } from '../relay/outage.js';
import type { Handover } from './handover.js';
import type { StreamEvent } from './stream-batch.js';
import { StreamGate } from './stream-gate.js';
import type { StreamSession } from './stream-session.js';
import type { StreamInFlight } from './stream-state.js';

export interface TakeParts {
  readonly pool: Pool;
  readonly logger: Logger;
  readonly relayId: string;
  readonly batchSize: number;
  readonly handover: Handover;
  readonly gate: StreamGate;
  readonly inFlight: StreamInFlight;
  readonly refused: RefusedAggregates;
}

/** A take: the batch to publish, the events to hand over, and where their aggregates leave the stream. */
export interface Take {
  readonly batch: StreamEvent[];
  readonly handovers: StreamEvent[];
  readonly progress: Map<string, number>;
}

/** The hand-over source's, not the stream's (polled, not publishable by the stream, or evicted). */
function handedOver(p: TakeParts, session: StreamSession, e: StreamEvent): boolean {
  return p.handover.isPolled(e.key) || !e.publishable || session.evicted.has(e.key);
}

/**
 * The next batch: events in stream order, at most batchSize, each aggregate's events in order.
 * An event the table has already (or P delivered) is settled; one of a polled aggregate, or
 * not publishable by the stream, is handed over — but only once nothing earlier of its
 * aggregate is in flight in the stream, so P takes up exactly where the stream left off.
 */
export function take(p: TakeParts, session: StreamSession): Take {
  const { handover, gate } = p;
  const busy = p.inFlight.busy;
  const batch: StreamEvent[] = [];
  const handovers: StreamEvent[] = [];
  const progress = new Map<string, number>();
  const skipped: StreamEvent[] = [];
  const keep: StreamEvent[] = [];
  const blocked = new Set<string>();
  const inBatch = new Set<string>();
  const waiting = new Set(p.refused.waiting());
  const queue = session.queue;
  let i = 0;
  for (; i < queue.length; i++) {
    if (batch.length >= p.batchSize) break;
    const e = queue[i]!;
    if (blocked.has(e.key)) {
      keep.push(e);
      continue;
    }
    // An aggregate of the start read: its first streamed event says whether its rows stream again.
    if (handover.isUnknown(e.key) && handover.resolve(e.key, e.message.sequence, e.via) === 'skip') {
      skipped.push(e);
      continue;
    }
    if (handover.skips(e.key, e.message.sequence, e.via)) {
      skipped.push(e);
      continue;
    }
    if (handedOver(p, session, e)) {
      if (busy.has(e.key) || inBatch.has(e.key)) {
        blocked.add(e.key);
        keep.push(e);
        continue;
      }
      gate.forget(e.key);
      handovers.push(e);
      continue;
    }
    if (waiting.has(e.key)) {
      blocked.add(e.key);
      keep.push(e);
      continue;
    }
    if (StreamGate.gated(e)) {
      const verdict = gate.check(e);
      if (verdict.kind === 'skip') {
        skipped.push(e);
        continue;
      }
      if (
        verdict.kind === 'unknown' ||
        (verdict.kind === 'handover' && (busy.has(e.key) || inBatch.has(e.key)))
      ) {
        blocked.add(e.key);
        keep.push(e);
        continue;
      }
      if (verdict.kind === 'handover') {
        p.logger.warn(
          {
            relayId: p.relayId,
            aggregate: e.key.replace('\u001f', '/'),
            sequence: e.message.sequence,
            delivered: verdict.delivered,
          },
          verdict.repeat
            ? 'caller version at or below the last published: handed to the polling path (a repeat goes dead)'
            : 'caller version gap: handed to the polling path (bridged after the gap grace)',
        );
        gate.forget(e.key);
        progress.set(e.key, verdict.delivered);
        handovers.push(e);
        continue;
      }
    } else gate.passed(e);
    batch.push(e);
    inBatch.add(e.key);
  }
  session.queue = i < queue.length ? keep.concat(queue.slice(i)) : keep;
  if (skipped.length > 0) session.settle(skipped);
  return { batch, handovers, progress };
}

/** The gate's progress lookup for the queue's gated aggregates it has not seen (one statement). */
export async function lookUp(p: TakeParts, session: StreamSession): Promise<void> {
  const keys = p.gate.unknown(session.queue, (e) => handedOver(p, session, e));
  if (keys.length > 0) await p.gate.lookUp(p.pool, keys);
}
