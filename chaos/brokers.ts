/**
 * The private broker of a chaos run (never the machine's shared one): a nats-server with
 * JetStream, or a single-node Kafka started by scripts/kafka.sh. `restart()` is a kill -9 and
 * a start on the same store. Components reach it through a TcpProxy.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { Admin } from '@platformatic/kafka';
import { ensureStream } from '../dist/publishers/nats.js';
import { PrivateKafka } from '../test/helpers/kafka.js';
import { PrivateNats } from '../test/helpers/processes.js';

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

  private constructor(private readonly kafka: PrivateKafka) {}

  /** Starts it advertising `advertisedPort` (the proxy in front of it). */
  static async start(advertisedPort: number): Promise<KafkaBroker> {
    return new KafkaBroker(await PrivateKafka.start({ advertisedPort }));
  }

  get port(): number {
    return this.kafka.port;
  }

  get sharedProxyPort(): number {
    return this.kafka.advertisedPort;
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

  async restart(): Promise<void> {
    await this.kafka.kill();
    await this.kafka.up();
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

  destroy(): Promise<void> {
    return this.kafka.destroy();
  }
}

/** Starts the private broker; Kafka advertises `proxyPort`, the proxy every client goes through. */
export function startBroker(kind: BrokerKind, proxyPort: number): Promise<ChaosBroker> {
  return kind === 'nats' ? NatsBroker.start() : KafkaBroker.start(proxyPort);
}
