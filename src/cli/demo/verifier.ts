/**
 * The verifying consumer: an independent observer of what the broker delivered. It
 * records every received event id and checks per-aggregate order (sequence = last + 1).
 */

import type { Ledger } from './order-service.js';

/** Records every received event and checks per-aggregate order (sequence = last + 1). */
export class Verifier {
  readonly received = new Set<string>();
  private readonly lastSequence = new Map<string, number>();
  duplicates = 0;
  orderViolations = 0;
  readonly violations: string[] = [];
  rejected = 0;

  get aggregates(): number {
    return this.lastSequence.size;
  }

  record(eventId: string, aggregateId: string, sequence: number): void {
    if (this.received.has(eventId)) {
      this.duplicates += 1; // a redelivery: at-least-once at work, not an error
      return;
    }
    this.received.add(eventId);
    const last = this.lastSequence.get(aggregateId) ?? 0;
    if (sequence !== last + 1) {
      this.orderViolations += 1;
      if (this.violations.length < 5) this.violations.push(`${aggregateId}: got ${sequence} after ${last}`);
    }
    this.lastSequence.set(aggregateId, Math.max(last, sequence));
  }

  /** An event that failed verification (bad signature, missing headers). */
  reject(): void {
    this.rejected += 1;
  }

  /** Reads the CloudEvents envelope headers and records the event; false when they are missing. */
  recordEnvelope(get: (name: string) => string | undefined): boolean {
    const eventId = get('ce-id');
    const aggregateId = get('ce-aggregateid');
    const sequence = Number(get('ce-sequence'));
    if (!eventId || !aggregateId || !Number.isInteger(sequence)) {
      this.reject();
      return false;
    }
    this.record(eventId, aggregateId, sequence);
    return true;
  }
}

/** Committed events the verifier has not received (yet). */
export function missing(ledger: Ledger, verifier: Verifier): string[] {
  return [...ledger.committed].filter((id) => !verifier.received.has(id));
}
