/**
 * Publishers for the CLI, from flags or from a config file. Broker clients are
 * optional peer dependencies: each publisher module is imported only when asked
 * for, with an install hint when its client is missing.
 */
import type { Publisher } from '../publishers/contract.js';
import { routerPublisher } from '../publishers/router.js';
import { CliError, usageError } from './common.js';
import type { PublisherSpec, RelayConfig } from './config.js';
import { readSecretFile, WEBHOOK_SECRET_ENV } from './webhook-secret.js';

const INSTALL: Record<PublisherSpec['kind'], string> = {
  nats: 'npm install @nats-io/jetstream@3.3 @nats-io/transport-node@3.3',
  webhook: '',
  kafka: 'npm install @platformatic/kafka@1.35',
  rabbitmq: 'npm install amqplib@2',
  redis: 'npm install redis@5',
  mqtt: 'npm install mqtt@5',
};

async function load<T>(kind: PublisherSpec['kind'], importer: () => Promise<T>): Promise<T> {
  try {
    return await importer();
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    throw new CliError(`the ${kind} publisher needs its client library: ${INSTALL[kind]}`, 1, {
      cause: error,
    });
  }
}

const list = (value: string | readonly string[]): string[] =>
  (typeof value === 'string' ? value.split(',') : [...value])
    .map((s) => s.trim())
    .filter((s) => s.length > 0);

/** The NATS publisher module (optional peer dependencies), with an install hint when missing. */
export function importNats(): Promise<typeof import('../publishers/nats/index.js')> {
  return load('nats', () => import('../publishers/nats/index.js'));
}

/** One publisher from its spec (a config entry, or what a flag says). */
export async function publisherFromSpec(spec: PublisherSpec, webhookSecret?: string): Promise<Publisher> {
  const ceSource = spec.ceSource === undefined ? {} : { ceSource: spec.ceSource };
  switch (spec.kind) {
    case 'nats': {
      const { natsPublisher } = await importNats();
      return natsPublisher({
        url: list(spec.url),
        stream: spec.stream,
        streamSubjects: spec.streamSubjects,
        ...ceSource,
      });
    }
    case 'webhook': {
      const { webhookPublisher } = await import('../publishers/webhook/index.js');
      const secret =
        spec.secret ??
        (spec.secretFile === undefined ? undefined : readSecretFile(spec.secretFile, 'secretFile')) ??
        webhookSecret;
      if (!secret) {
        throw usageError(
          `a webhook publisher needs a signing secret: set ${WEBHOOK_SECRET_ENV}, or pass ` +
            '--webhook-secret-file <path>, or give "secretFile" in the config',
        );
      }
      return webhookPublisher({ endpoints: spec.url, secret, ...ceSource });
    }
    case 'kafka': {
      const { kafkaPublisher } = await load('kafka', () => import('../publishers/kafka/index.js'));
      return kafkaPublisher({ url: list(spec.url), clientId: spec.clientId, ...ceSource });
    }
    case 'rabbitmq': {
      const { rabbitmqPublisher } = await load('rabbitmq', () => import('../publishers/rabbitmq/index.js'));
      return rabbitmqPublisher({
        url: spec.url,
        ...(spec.exchange === undefined ? {} : { exchange: spec.exchange }),
        ...ceSource,
      });
    }
    case 'redis': {
      const { redisPublisher } = await load('redis', () => import('../publishers/redis/index.js'));
      return redisPublisher({ url: spec.url, ...ceSource });
    }
    case 'mqtt': {
      const { mqttPublisher } = await load('mqtt', () => import('../publishers/mqtt/index.js'));
      return mqttPublisher({ url: spec.url, ...ceSource });
    }
  }
}

/** The relay's publisher from a config file: one publisher, or a router over several. */
export async function publisherFromConfig(config: RelayConfig, webhookSecret?: string): Promise<Publisher> {
  const made = new Map<string, Publisher>();
  try {
    for (const [name, spec] of Object.entries(config.publishers)) {
      made.set(name, await publisherFromSpec(spec, webhookSecret));
    }
  } catch (error) {
    await Promise.all([...made.values()].map((p) => p.close().catch(() => undefined)));
    throw error;
  }
  if (config.routes.length === 0 && made.size === 1) return [...made.values()][0]!;
  return routerPublisher({
    routes: config.routes.map((r) => ({
      match: r.match,
      publisher: made.get(r.to)!,
      ...(r.topic === undefined ? {} : { topic: r.topic }),
    })),
    ...(config.default === undefined ? {} : { fallback: made.get(config.default)! }),
  });
}
