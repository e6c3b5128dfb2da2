/**
 * The skip marker: what `dead skip` puts in place of a dead event (same event id, aggregate and
 * sequence), so that the relay publishes it in order and consumers learn that the event was
 * skipped — their inbox records it, moves the aggregate's position past it and runs no handler.
 */

/** The event type of a skip marker. Producers cannot use it (nor any type starting `tx-outbox.`). */
export const SKIPPED_EVENT_TYPE = 'tx-outbox.skipped';

/** Event types starting with this are tx-outbox's own; `enqueue` refuses them. */
export const RESERVED_TYPE_PREFIX = 'tx-outbox.';

/** A skip marker's payload (JSON). */
export interface SkipMarker {
  /** The type of the event that was skipped. */
  readonly skippedType: string;
  /** Its schema version. */
  readonly skippedSchemaVersion: number;
  /** Why the operator skipped it. */
  readonly reason: string;
  /** Who skipped it. */
  readonly actor: string;
  /** When (ISO 8601, database clock). */
  readonly at: string;
}

/** The marker a skip-marker payload holds; undefined when it is not one. */
export function skipMarkerOf(payload: Uint8Array): SkipMarker | undefined {
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(payload).toString('utf8'));
  } catch {
    return undefined;
  }
  if (value === null || typeof value !== 'object') return undefined;
  const m = value as Record<string, unknown>;
  if (typeof m['skippedType'] !== 'string' || m['skippedType'] === '') return undefined;
  return {
    skippedType: m['skippedType'],
    skippedSchemaVersion: typeof m['skippedSchemaVersion'] === 'number' ? m['skippedSchemaVersion'] : 1,
    reason: typeof m['reason'] === 'string' ? m['reason'] : '',
    actor: typeof m['actor'] === 'string' ? m['actor'] : '',
    at: typeof m['at'] === 'string' ? m['at'] : '',
  };
}

/**
 * The type a message is routed by: its own, or for a skip marker the skipped event's, so that the
 * marker goes where the event would have gone (default destinations, router rules).
 */
export function routedType(message: { readonly type: string; readonly payload: Uint8Array }): string {
  if (message.type !== SKIPPED_EVENT_TYPE) return message.type;
  return skipMarkerOf(message.payload)?.skippedType ?? message.type;
}
