import type { Fence } from '../core/fence.js';
import type { Logger } from '../logger.js';
import { redactText } from '../redact.js';
import type { RefusedAggregates } from '../relay/outage.js';
import type { Recorder } from '../relay/record.js';
import type { RelaySession } from '../relay/session.js';
import type { RelayCounters } from '../relay/stats.js';
import { type Failure, MAX_ERROR_CHARS, type Verdict } from '../relay/verdicts.js';
import type { Handover } from './handover.js';
import type { HandoverRow, ProgressRow } from './handover-rows.js';
import type { OwnTransactions, StreamEvent } from './stream-batch.js';
import type { RefusalBound, StreamGate } from './stream-gate.js';
import type { WalHistory } from './stream-history.js';
import type { StreamSession } from './stream-session.js';
import type { StreamCounters, StreamInFlight } from './stream-state.js';

export interface StreamSettlerParts {
  readonly logger: Logger;
  readonly relayId: string;
  readonly counters: RelayCounters;
  readonly stream: StreamCounters;
  readonly leases: { snapshot(): { partitions: number[]; epochs: string[] } };
  readonly handover: Handover;
  readonly gate: StreamGate;
  readonly refusals: RefusalBound;
  readonly refused: RefusedAggregates;
  readonly inFlight: StreamInFlight;
  readonly own: OwnTransactions;
  readonly recorder: Recorder;
  /** The history of delivered WAL-mode events (`history` on; absent: nothing written for them). */
  readonly history?: WalHistory | undefined;
  readonly recordSession: RelaySession;
  /** Handovers commit with synchronous_commit on: the slot moves past them once they commit. */
  readonly handoverSession: RelaySession;
  /** Wakes the hand-over source: a handover committed. */
  readonly wakeHandover: () => void;
}

/**
 * Settling streamed events: a judged batch's outcome (table rows through the outcome statement,
 * WAL-mode failures into the table), and the hand-over of events to the hand-over source.
 */
export class StreamSettler {
  constructor(private readonly p: StreamSettlerParts) {}

  /**
   * Hands streamed events over to the polling path: WAL-mode events become pending rows, table
   * events are in the table already; an aggregate that leaves the stream here gets its progress
   * (delivered up to the event before: the stream delivered all of it until now). Settled once
   * the handover committed.
   */
  async handOver(
    session: StreamSession,
    events: readonly StreamEvent[],
    delivered: ReadonlyMap<string, number> = new Map(),
  ): Promise<void> {
    const p = this.p;
    const rows: HandoverRow[] = [];
    const progress: ProgressRow[] = [];
    const entered = new Set<string>();
    for (const e of events) {
      if (!p.handover.isPolled(e.key) && !entered.has(e.key)) {
        entered.add(e.key);
        progress.push({
          key: e.key,
          delivered: delivered.get(e.key) ?? e.message.sequence - 1,
          blockMs: null,
        });
      }
      p.handover.enter(e.key, e.message.sequence);
      session.evicted.delete(e.key);
      if (e.undecodable !== undefined) {
        p.logger.error(
          { relayId: p.relayId, id: e.message.id, error: e.undecodable },
          'WAL-mode message not readable: kept as a dead event (tx-outbox dead list)',
        );
        const error = redactText(`permanent: ${e.undecodable}`).slice(0, MAX_ERROR_CHARS);
        const failure: Failure = { id: e.message.id, status: 'dead', delayMs: 0, error, reason: 'permanent' };
        rows.push({ event: e, failure });
        p.counters.recorded(0, [failure]);
      } else if (e.via === 'wal') rows.push(p.gate.fresh(e) ? { event: e, fresh: true } : { event: e });
    }
    const { partitions, epochs } = p.leases.snapshot();
    await this.write({ relayId: p.relayId, partitions, epochs }, rows, progress, events);
    for (const e of events) p.handover.claimableUpTo(e.key, e.message.sequence);
    p.stream.handovers += events.length;
    session.settle(events);
    p.wakeHandover();
  }

  private async write(
    fence: Fence,
    rows: readonly HandoverRow[],
    progress: readonly ProgressRow[],
    events: readonly StreamEvent[],
  ): Promise<void> {
    const p = this.p;
    const tableXids = events.filter((e) => e.via === 'table').map((e) => e.xid);
    if (rows.length === 0 && progress.length === 0 && tableXids.length === 0) return;
    p.inFlight.handing(events, 1);
    try {
      try {
        const client = await p.handoverSession.get();
        // The table-mode rows handed over must be visible before their aggregate may be released
        // (P's release check would not see them, and let the stream publish past them).
        await p.handover.visible(client, tableXids);
        if (rows.length > 0 || progress.length > 0)
          p.own.add(await p.handover.write(client, fence, rows, progress));
      } catch (error) {
        await p.handoverSession.release(error);
        throw error;
      }
    } finally {
      p.inFlight.handing(events, -1);
    }
  }

  /**
   * What the verdict means for the queue, at once (before the next batch is taken): failed
   * aggregates are P's from now on; events refused as unavailable, or left behind a failure or
   * refusal, go back to the queue's front in order; an aggregate refused while others are
   * delivered past the {@link RefusalBound} leaves the stream.
   */
  judged(session: StreamSession, batch: readonly StreamEvent[], verdict: Verdict): void {
    const p = this.p;
    const done = new Set(verdict.delivered);
    for (const f of verdict.failures) done.add(f.id);
    const failed = new Map(verdict.failures.map((f) => [f.id, f]));
    const back: StreamEvent[] = [];
    for (const e of batch) {
      if (failed.has(e.message.id)) p.handover.enter(e.key, e.message.sequence);
      else if (!done.has(e.message.id)) back.push(e);
    }
    if (back.length > 0) {
      p.inFlight.track(back, -1);
      for (const e of back) p.gate.unpass(e);
      session.queue = back.concat(session.queue);
    }
    const deliveredKeys = batch.filter((e) => done.has(e.message.id)).map((e) => e.key);
    for (const key of p.refusals.judged(deliveredKeys, verdict.refused)) {
      // Refused while the stream delivered others: the polling path retries it on its own backoff.
      session.evicted.add(key);
      p.refused.settled(key);
      p.logger.warn(
        { relayId: p.relayId, aggregate: key.replace('\u001f', '/') },
        'aggregate refused as unavailable while others were delivered: handed to the polling path',
      );
    }
  }

  /**
   * The outcome of a published batch: table-mode events through the outcome statement (delivered
   * rows deleted, failed ones rescheduled or dead, progress, their history; fenced); WAL-mode
   * failures into the table (handover); WAL-mode deliveries write their history rows (history on)
   * and caller versions' progress, nothing else. Then the batch's delivered and failed events are
   * settled (the slot may be confirmed past them).
   */
  async record(
    session: StreamSession,
    batch: readonly StreamEvent[],
    verdict: Verdict,
    fence: Fence,
  ): Promise<void> {
    const p = this.p;
    const byId = new Map(batch.map((e) => [e.message.id, e]));
    const tableDelivered: string[] = [];
    const tableFailures: Failure[] = [];
    const rows: HandoverRow[] = [];
    const progress: ProgressRow[] = [];
    const settled: StreamEvent[] = [];
    const walDelivered: StreamEvent[] = [];
    const walFailures: Failure[] = [];
    const walCaller: StreamEvent[] = [];
    for (const id of verdict.delivered) {
      const e = byId.get(id);
      if (!e) continue;
      settled.push(e);
      if (e.via === 'table') tableDelivered.push(id);
      else {
        walDelivered.push(e);
        if (e.wal?.callerVersion) walCaller.push(e);
      }
    }
    for (const f of verdict.failures) {
      const e = byId.get(f.id);
      if (!e) continue;
      settled.push(e);
      if (e.via === 'table') {
        tableFailures.push(f);
        progress.push({ key: e.key, delivered: e.message.sequence - 1, blockMs: null });
      } else {
        walFailures.push(f);
        rows.push({ event: e, failure: f });
        progress.push({
          key: e.key,
          delivered: e.message.sequence - 1,
          blockMs: f.status === 'dead' ? -1 : f.delayMs,
        });
      }
    }
    try {
      if (tableDelivered.length > 0 || tableFailures.length > 0) {
        const xids = settled.filter((e) => e.via === 'table').map((e) => e.xid);
        await p.handover.visible(await p.recordSession.get(), xids);
        await p.recorder.record({ ...verdict, delivered: tableDelivered, failures: tableFailures });
      }
      if (walCaller.length > 0) await p.gate.recordWal(await p.recordSession.get(), fence, walCaller);
      if (p.history && walDelivered.length > 0)
        await p.history.record(await p.recordSession.get(), fence, walDelivered);
      const failedIds = new Set(verdict.failures.map((f) => f.id));
      const failed = settled.filter((e) => failedIds.has(e.message.id));
      await this.write(fence, rows, progress, failed);
      for (const e of failed) p.handover.claimableUpTo(e.key, e.message.sequence);
      if (walDelivered.length > 0 || walFailures.length > 0)
        p.counters.recorded(walDelivered.length, walFailures);
      if (verdict.failures.length > 0) p.wakeHandover();
    } finally {
      p.inFlight.track(settled, -1);
    }
    session.settle(settled);
  }
}
