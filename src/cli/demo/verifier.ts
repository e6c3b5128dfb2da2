/**
 * The verifying consumer: an independent observer of what the broker delivered. It
 * records every received event id and checks per-aggregate order (sequence = last + 1).
 */

import { ATTRIBUTE_NAMES } from '../../envelope/attributes.js';
import { fromEnvelope, type InboxMessage } from '../../inbox/message.js';
import type { Ledger } from './order-service.js';

/**
 * The headers the demo's sinks carry the envelope in (NATS and HTTP bindings: `ce-<name>`, the
 * HTTP content type): what the verifier asks each sink for.
 */
const ENVELOPE_HEADERS = [...ATTRIBUTE_NAMES.map((name) => `ce-${name}`), 'content-type'];
const NO_PAYLOAD = new Uint8Array(0);

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

  /**
   * Reads the CloudEvents envelope as the consumer adapters do (`fromEnvelope`: the binding's
   * decoding, so an aggregate id is the one enqueued) and records the event; false when the
   * envelope is missing or invalid.
   */
  recordEnvelope(get: (name: string) => string | undefined): boolean {
    const headers: Record<string, string | undefined> = {};
    for (const name of ENVELOPE_HEADERS) headers[name] = get(name);
    let message: InboxMessage;
    try {
      message = fromEnvelope(headers, NO_PAYLOAD);
    } catch {
      this.reject();
      return false;
    }
    this.record(message.eventId, message.aggregateId, message.sequence);
    return true;
  }
}

/** Committed events the verifier has not received (yet). */
export function missing(ledger: Ledger, verifier: Verifier): string[] {
  return [...ledger.committed].filter((id) => !verifier.received.has(id));
}
