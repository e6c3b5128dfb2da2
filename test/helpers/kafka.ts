import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Admin } from '@platformatic/kafka';
import { freePort } from './processes.js';

const KAFKA_SCRIPT = join(import.meta.dirname, '..', '..', 'scripts', 'kafka.sh');

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

/**
 * A private single-node Kafka (scripts/kafka.sh on free ports and a temp dir) that a test may
 * kill and start again on the same store; the shared broker on 9092 is never touched. With
 * `advertisedPort`, the broker advertises that port (a proxy in front of it) to its clients.
 */
export class PrivateKafka {
  private constructor(
    readonly dir: string,
    readonly port: number,
    readonly controllerPort: number,
    readonly advertisedPort: number,
  ) {}

  static async start(options: { advertisedPort?: number } = {}): Promise<PrivateKafka> {
    const dir = mkdtempSync(join(tmpdir(), 'txo-kafka-'));
    const port = await freePort();
    const kafka = new PrivateKafka(dir, port, await freePort(), options.advertisedPort ?? port);
    try {
      await kafka.up();
      return kafka;
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }

  /** Starts the broker (again) on its store and waits until it answers metadata requests. */
  async up(): Promise<void> {
    await promisify(execFile)('bash', [KAFKA_SCRIPT, 'start'], {
      timeout: 180_000,
      env: {
        ...process.env,
        TXO_KAFKA_PORT: String(this.port),
        TXO_KAFKA_CONTROLLER_PORT: String(this.controllerPort),
        TXO_KAFKA_ADVERTISED_PORT: String(this.advertisedPort),
        TXO_KAFKA_DIR: this.dir,
      },
    });
  }

  /** kill -9, waiting until the process is gone. */
  async kill(): Promise<void> {
    let pid: number;
    try {
      pid = Number(readFileSync(join(this.dir, 'kafka.pid'), 'utf8').trim());
      process.kill(pid, 'SIGKILL');
    } catch {
      return;
    }
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline) {
      try {
        process.kill(pid, 0);
      } catch {
        return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async destroy(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
