import { connect } from 'node:net';

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

/** Whether the broker listens; when not, says which file skips and how to start one. */
export async function kafkaAvailable(file: string): Promise<boolean> {
  const up = await portOpen(KAFKA_HOST, KAFKA_PORT);
  if (!up)
    console.warn(
      `${file}: SKIPPED, nothing listens on ${KAFKA_BROKER}. Start a broker with: bash scripts/kafka.sh start`,
    );
  return up;
}
