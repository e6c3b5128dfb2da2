/**
 * The private broker of a chaos run (never the machine's shared one): a nats-server with
 * JetStream, or a single-node Kafka started by scripts/kafka.sh. `restart()` is a kill -9 and
 * a start on the same store. Components reach it through a FaultProxy.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Admin } from '@platformatic/kafka';
import { ensureStream } from '../dist/publishers/nats.js';
import { freePort, PrivateNats } from '../test/helpers/processes.js';

const run = promisify(execFile);

export const BROKER_KINDS = ['nats', 'kafka'] as const;
export type BrokerKind = (typeof BROKER_KINDS)[number];

/** Where the events go: the NATS stream and its subjects, or the Kafka topic. */
export const STREAM = 'CHAOS';
export const SUBJECTS = ['order.>'];
export const TOPIC = 'order.placed';
export const KAFKA_PARTITIONS = 8;

export interface ChaosBroker {
  readonly kind: BrokerKind;
  /** The port the server listens on (the proxies forward to it). */
  readonly port: number;
  /** Kafka: every client goes through one proxy, the port the broker advertises. */
  readonly sharedProxyPort: number | undefined;
  /** Creates the stream or topic. */
  setup(): Promise<void>;
  /** kill -9, then start again on the same store. */
  restart(): Promise<void>;
  /** Messages the broker stores (duplicates included). */
  storedMessages(): Promise<number>;
  destroy(): Promise<void>;
}

class NatsBroker implements ChaosBroker {
  readonly kind = 'nats' as const;
  readonly sharedProxyPort = undefined;

  private constructor(private readonly nats: PrivateNats) {}

  static async start(): Promise<NatsBroker> {
    return new NatsBroker(await PrivateNats.start());
  }

  get port(): number {
    return this.nats.port;
  }

  async setup(): Promise<void> {
    await ensureStream(this.nats.url, { name: STREAM, subjects: SUBJECTS });
  }

  async restart(): Promise<void> {
    await this.nats.down();
    await this.nats.up();
  }

  async storedMessages(): Promise<number> {
    const nc = await connect({ servers: this.nats.url });
    try {
      const info = await (await jetstreamManager(nc)).streams.info(STREAM);
      return info.state.messages;
    } finally {
      await nc.close();
    }
  }

  destroy(): Promise<void> {
    return this.nats.destroy();
  }
}

class KafkaBroker implements ChaosBroker {
  readonly kind = 'kafka' as const;

  private constructor(
    private readonly dir: string,
    readonly port: number,
    private readonly controllerPort: number,
    readonly sharedProxyPort: number,
  ) {}

  /** Starts it advertising `advertisedPort` (the proxy in front of it). */
  static async start(advertisedPort: number): Promise<KafkaBroker> {
    const dir = mkdtempSync(join(tmpdir(), 'txo-chaos-kafka-'));
    const broker = new KafkaBroker(dir, await freePort(), await freePort(), advertisedPort);
    try {
      await broker.script('start');
      return broker;
    } catch (error) {
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }

  private async script(command: 'start' | 'stop'): Promise<void> {
    await run('bash', ['scripts/kafka.sh', command], {
      timeout: 180_000,
      env: {
        ...process.env,
        TXO_KAFKA_PORT: String(this.port),
        TXO_KAFKA_CONTROLLER_PORT: String(this.controllerPort),
        TXO_KAFKA_ADVERTISED_PORT: String(this.sharedProxyPort),
        TXO_KAFKA_DIR: this.dir,
        TXO_KAFKA_HEAP: process.env['TXO_KAFKA_HEAP'] ?? '512m',
      },
    });
  }

  private admin(): Admin {
    return new Admin({ clientId: 'txo-chaos', bootstrapBrokers: [`127.0.0.1:${this.port}`] });
  }

  async setup(): Promise<void> {
    const admin = this.admin();
    try {
      await admin.createTopics({ topics: [TOPIC], partitions: KAFKA_PARTITIONS, replicas: 1 });
    } finally {
      await admin.close();
    }
  }

  private pid(): number | undefined {
    try {
      return Number(readFileSync(join(this.dir, 'kafka.pid'), 'utf8').trim()) || undefined;
    } catch {
      return undefined;
    }
  }

  private async kill(): Promise<void> {
    const pid = this.pid();
    if (pid === undefined) return;
    try {
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

  async restart(): Promise<void> {
    await this.kill();
    await this.script('start');
  }

  async storedMessages(): Promise<number> {
    const admin = this.admin();
    try {
      const partitions = Array.from({ length: KAFKA_PARTITIONS }, (_, partitionIndex) => ({
        partitionIndex,
        timestamp: -1n,
      }));
      const [ends] = await admin.listOffsets({ topics: [{ name: TOPIC, partitions }] });
      return (ends?.partitions ?? []).reduce((sum, p) => sum + Number(p.offset), 0);
    } finally {
      await admin.close();
    }
  }

  async destroy(): Promise<void> {
    await this.kill();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Starts the private broker; Kafka advertises `proxyPort`, the proxy every client goes through. */
export function startBroker(kind: BrokerKind, proxyPort: number): Promise<ChaosBroker> {
  return kind === 'nats' ? NatsBroker.start() : KafkaBroker.start(proxyPort);
}
