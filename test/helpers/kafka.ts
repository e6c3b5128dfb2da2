import { connect } from 'node:net';
import type { Admin } from '@platformatic/kafka';

/** The Kafka broker the tests use: `bash scripts/kafka.sh start` runs one; CI starts it. */
export const KAFKA_HOST = '127.0.0.1';
export const KAFKA_PORT = 9092;
export const KAFKA_BROKER = `${KAFKA_HOST}:${KAFKA_PORT}`;

function portOpen(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    const done = (up: boolean): void => {
      socket.destroy();
      resolve(up);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/** Whether the broker listens; when not, says what skips (`file`, or `file: what`) and how to start one. */
export async function kafkaAvailable(what: string): Promise<boolean> {
  const up = await portOpen(KAFKA_HOST, KAFKA_PORT);
  if (!up)
    console.warn(
      `${what} SKIPPED, nothing listens on ${KAFKA_BROKER}. Start a broker with: bash scripts/kafka.sh start`,
    );
  return up;
}

/** Whether the consumer group (named like the topic here) committed every partition up to its end. */
export async function committedToEnd(
  admin: Admin,
  topic: string,
  partitions: number,
  group = topic,
): Promise<boolean> {
  const requested = Array.from({ length: partitions }, (_, partitionIndex) => ({
    partitionIndex,
    timestamp: -1n,
  }));
  const [ends] = await admin.listOffsets({ topics: [{ name: topic, partitions: requested }] });
  const [offsets] = await admin.listConsumerGroupOffsets({ groups: [group] });
  const committed = new Map(
    (offsets?.topics.find((t) => t.name === topic)?.partitions ?? []).map((p) => [
      p.partitionIndex,
      p.committedOffset,
    ]),
  );
  return (ends?.partitions ?? []).every(
    (p) => p.offset <= 0n || (committed.get(p.partitionIndex) ?? -1n) >= p.offset,
  );
}
