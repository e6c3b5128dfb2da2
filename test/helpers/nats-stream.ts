import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { percentDecode } from '../../src/envelope/percent.js';

export interface StoredEvent {
  readonly streamSeq: number;
  readonly subject: string;
  readonly eventId: string;
  readonly aggregateId: string;
  readonly sequence: number;
}

/** Every message a stream holds, in stream order, read back with an ordered consumer. */
export async function readStream(servers: string, stream: string): Promise<StoredEvent[]> {
  const nc = await connect({ servers });
  try {
    const jsm = await jetstreamManager(nc);
    const info = await jsm.streams.info(stream);
    const total = info.state.messages;
    const out: StoredEvent[] = [];
    if (total === 0) return out;
    const consumer = await jetstream(nc).consumers.get(stream);
    const messages = await consumer.consume({ max_messages: 1000 });
    for await (const m of messages) {
      out.push({
        streamSeq: m.seq,
        subject: m.subject,
        eventId: m.headers?.get('Nats-Msg-Id') ?? '',
        aggregateId: percentDecode(m.headers?.get('ce-aggregateid') ?? ''),
        sequence: Number(m.headers?.get('ce-sequence')),
      });
      if (out.length >= total) break;
    }
    return out;
  } finally {
    await nc.close();
  }
}

export async function deleteStream(servers: string, stream: string): Promise<void> {
  const nc = await connect({ servers });
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.delete(stream).catch(() => undefined);
  } finally {
    await nc.close();
  }
}

/** A core NATS subscription: sees every publish on the subjects, duplicates included. */
export async function watchSubjects(
  servers: string,
  subject: string,
): Promise<{ seen: string[]; close: () => Promise<void> }> {
  const nc: NatsConnection = await connect({ servers });
  const seen: string[] = [];
  const sub = nc.subscribe(subject);
  void (async () => {
    for await (const m of sub) seen.push(m.headers?.get('Nats-Msg-Id') ?? '');
  })();
  await nc.flush();
  return {
    seen,
    close: async () => {
      await nc.drain();
    },
  };
}

/** Per-aggregate order check: every aggregate's sequences appear as 1, 2, 3 … with no gap. */
export function orderViolations(events: readonly StoredEvent[]): string[] {
  const last = new Map<string, number>();
  const problems: string[] = [];
  for (const e of events) {
    const prev = last.get(e.aggregateId) ?? 0;
    if (e.sequence !== prev + 1) problems.push(`${e.aggregateId}: ${e.sequence} after ${prev}`);
    last.set(e.aggregateId, Math.max(prev, e.sequence));
  }
  return problems;
}
