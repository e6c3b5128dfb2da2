/**
 * `tx-outbox relay`'s publisher: exactly one publisher flag (`--nats`, `--kafka`, `--rabbitmq`,
 * `--redis`, `--mqtt`, `--webhook`) or a config file, checked at the door, and described safely
 * for the start-up log.
 */

import { ceSourceOf } from '../envelope/ce-source.js';
import { redactUrl } from '../redact.js';
import { usageError } from './common.js';
import { findConfig, loadConfig, type PublisherSpec, type RelayConfig } from './config.js';
import { commaList, type RelayCliOptions } from './relay-flags.js';

export type PublisherChoice =
  | { readonly kind: 'spec'; readonly spec: PublisherSpec }
  | { readonly kind: 'config'; readonly file: string; readonly config: RelayConfig };

const PUBLISHER_FLAGS = ['nats', 'webhook', 'kafka', 'rabbitmq', 'redis', 'mqtt'] as const;

/** Exactly one publisher flag, or a config file (given, or found in the working directory). */
export async function choosePublishers(
  options: RelayCliOptions,
  { ceSource, ceSourceFlag = '--ce-source' }: { ceSource?: string; ceSourceFlag?: string },
): Promise<PublisherChoice> {
  const flags = PUBLISHER_FLAGS.filter((f) => options[f] !== undefined);
  if (flags.length > 1) {
    throw usageError(
      `choose one publisher: --${flags.join(' and --')} were given; use --config <file> to feed several`,
    );
  }
  if (flags.length === 1 && options.config !== undefined) {
    throw usageError(`choose --${flags[0]} or --config, not both`);
  }
  if (flags.length === 0 && ceSource !== undefined) {
    throw usageError(
      `${ceSourceFlag} goes with a publisher flag; in a config file, give "ceSource" per publisher`,
    );
  }
  checkPublisherOptions(options);
  if (flags.length === 0) {
    const file = findConfig(options.config);
    if (file === undefined) {
      throw usageError(
        'no publisher given: pass --nats, --kafka, --rabbitmq, --redis, --mqtt or --webhook <url>, or --config <file>',
      );
    }
    return { kind: 'config', file, config: await loadConfig(file) };
  }
  return { kind: 'spec', spec: specFromFlags(options, ceSource, ceSourceFlag) };
}

function specFromFlags(
  options: RelayCliOptions,
  ceSource: string | undefined,
  flag = '--ce-source',
): PublisherSpec {
  const spec = publisherFlag(options);
  return ceSource === undefined ? spec : { ...spec, ceSource: ceSourceOf(ceSource, flag) };
}

function publisherFlag(options: RelayCliOptions): PublisherSpec {
  if (options.webhook !== undefined) return { kind: 'webhook', url: checkedWebhookUrl(options.webhook) };
  if (options.kafka !== undefined) return { kind: 'kafka', url: nonEmptyList('--kafka', options.kafka) };
  if (options.rabbitmq !== undefined) {
    return {
      kind: 'rabbitmq',
      url: options.rabbitmq,
      ...(options.rabbitmqExchange === undefined ? {} : { exchange: options.rabbitmqExchange }),
    };
  }
  if (options.redis !== undefined) return { kind: 'redis', url: options.redis };
  if (options.mqtt !== undefined) return { kind: 'mqtt', url: options.mqtt };
  return {
    kind: 'nats',
    url: nonEmptyList('--nats', options.nats ?? ''),
    ...(options.natsStream === undefined ? {} : { stream: options.natsStream }),
    ...(options.natsSubjects === undefined ? {} : { streamSubjects: options.natsSubjects }),
  };
}

function nonEmptyList(flag: string, value: string): string[] {
  const items = commaList(value);
  if (items.length === 0) throw usageError(`${flag} is empty: pass at least one address`);
  return items;
}

function checkPublisherOptions(options: RelayCliOptions): void {
  const secretFlag = options.webhookSecretFile !== undefined ? '--webhook-secret-file' : '--webhook-secret';
  if (
    options.webhook === undefined &&
    (options.webhookSecret !== undefined || options.webhookSecretFile !== undefined) &&
    options.config === undefined
  ) {
    throw usageError(`${secretFlag} needs --webhook <url> (or a webhook in --config)`);
  }
  if (
    options.nats === undefined &&
    (options.natsStream !== undefined || options.natsSubjects !== undefined)
  ) {
    throw usageError('--nats-stream and --nats-subjects need --nats <url>');
  }
  if (options.natsSubjects !== undefined && options.natsStream === undefined) {
    throw usageError('--nats-subjects needs --nats-stream <name> (the stream they describe)');
  }
  if (options.natsSubjects?.length === 0)
    throw usageError('--nats-subjects is empty: list at least one subject');
  if (options.rabbitmqExchange !== undefined && options.rabbitmq === undefined) {
    throw usageError('--rabbitmq-exchange needs --rabbitmq <url>');
  }
}

function checkedWebhookUrl(endpoint: string): string {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    throw usageError(
      `--webhook: "${redactUrl(endpoint)}" is not a URL; pass e.g. https://example.com/hooks/outbox`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw usageError(`--webhook: "${url.protocol}" URLs are not supported; pass an http: or https: URL`);
  }
  return endpoint;
}

/** Where events go, safe to log: passwords and query values masked. */
export function describe(spec: PublisherSpec): Record<string, string> {
  switch (spec.kind) {
    case 'nats':
      return {
        type: 'nats',
        servers: commaList(typeof spec.url === 'string' ? spec.url : spec.url.join(','))
          .map((server) => redactUrl(server))
          .join(','),
        ...(spec.stream ? { stream: spec.stream } : {}),
      };
    case 'kafka':
      return {
        type: 'kafka',
        brokers: typeof spec.url === 'string' ? spec.url : spec.url.join(','),
      };
    default:
      return { type: spec.kind, url: redactUrl(spec.url) };
  }
}
