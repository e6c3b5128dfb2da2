// STAND-IN (core): replaced by walproducer's src/cdc/wal-message.ts when merged.

/** The prefix of the logical messages that carry WAL-mode events of `schema`. */
export function eventsPrefix(schema: string): string {
  return `tx-outbox:${schema}`;
}

/** The prefix of the relay's heartbeat messages for `schema`. */
export function heartbeatPrefix(schema: string): string {
  return `tx-outbox:${schema}:heartbeat`;
}

/** A WAL-mode event as the relay reads it from a logical message. */
export interface WalEvent {
  readonly eventId: string;
  readonly partition: number;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly sequence: number;
  readonly sequenceBase: number;
  readonly type: string;
  readonly schemaVersion: number;
  readonly topic: string | null;
  readonly headers: Readonly<Record<string, string>>;
  readonly payload: Buffer;
  readonly contentType: 'application/json' | 'application/octet-stream';
  readonly createdAt: Date;
}

/** Stand-in encoding: a JSON header line, then the payload bytes. */
export function encodeWalEvent(event: Omit<WalEvent, 'payload'> & { payload: Buffer }): Buffer {
  const { payload, ...head } = event;
  return Buffer.concat([Buffer.from(`${JSON.stringify(head)}\n`), payload]);
}

export function decodeWalEvent(content: Buffer): WalEvent {
  const nl = content.indexOf(10);
  const head = JSON.parse(content.toString('utf8', 0, nl)) as Omit<WalEvent, 'payload' | 'createdAt'> & {
    createdAt: string;
  };
  return { ...head, createdAt: new Date(head.createdAt), payload: content.subarray(nl + 1) };
}
