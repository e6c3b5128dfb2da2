/** The options of the NATS JetStream publisher, resolved once into a frozen object. */
import type { NatsConnection, NodeConnectionOptions } from '@nats-io/transport-node';
import { ceSourceOption } from '../../envelope/ce-source.js';
import { OutboxValidationError } from '../../errors.js';
import { checkPositiveInteger, checkUrlOrClient } from '../../options/checks.js';
import { renamedOptions } from '../../options/renamed.js';
import { redactUrl } from '../../redact.js';
import type { OutboxMessage } from '../contract.js';
import { defaultDestination, destinationOption } from '../core/destination.js';

/** How `natsPublisher` publishes; both give the same outcomes. */
export type NatsPublishMode = 'pipeline' | 'client';

/** Options of `natsPublisher`. Give `url` or an existing `client`. */
export interface NatsPublisherOptions {
  /** Server URL(s), e.g. `nats://127.0.0.1:4222`. The publisher owns (and closes) this connection. */
  readonly url?: string | string[];
  /** @deprecated Use `url`. */
  readonly servers?: string | string[];
  /** An existing connection to use instead of `url`; the publisher never closes it. */
  readonly client?: NatsConnection;
  /** @deprecated Use `client`. */
  readonly connection?: NatsConnection;
  /** Extra client options for the connection made from `url` (auth, TLS, name …). */
  readonly clientOptions?: Omit<NodeConnectionOptions, 'servers'>;
  /** @deprecated Use `clientOptions`. */
  readonly connectionOptions?: Omit<NodeConnectionOptions, 'servers'>;
  /**
   * Stream every message must land in: publishes carry `expect: { streamName }`, so a subject
   * captured by another stream (or none) is refused by the server instead of stored elsewhere.
   */
  readonly stream?: string;
  /** With `stream`: the stream is created at first use if missing (file storage) with these subjects. */
  readonly streamSubjects?: readonly string[];
  /**
   * How long, in ms, the stream recognises a republished event id (`Nats-Msg-Id`) and keeps one
   * copy: the duplicate window of a stream this publisher creates. Default 2 minutes.
   */
  readonly dedupWindowMs?: number;
  /** @deprecated Use `dedupWindowMs`. */
  readonly duplicateWindowMs?: number;
  /** Subject of a message. Default: `message.topic`, else `${aggregateType}.${type}`. */
  readonly destination?: (message: OutboxMessage) => string;
  /** @deprecated Use `destination`. */
  readonly subject?: (message: OutboxMessage) => string;
  /**
   * CloudEvents `source` attribute of every event: a URI-reference such as
   * `https://orders.example.com`, `urn:example:orders` or `/orders`. Default `tx-outbox`.
   */
  readonly ceSource?: string;
  /** @deprecated Use `ceSource`. */
  readonly source?: string;
  /** Deadline for connecting and for each PubAck, in ms. Default 10 000. */
  readonly timeoutMs?: number;
  /** Upper bound of publishes awaiting their PubAck, across concurrent batches. Default 1024. */
  readonly maxInFlight?: number;
  /**
   * `pipeline` (default): core NATS publishes with a reply subject each, all PubAcks on one
   * wildcard subscription: several times the throughput of `client`, which publishes with
   * the official client's `js.publish()` (a request per message), kept for comparison and
   * as a fallback.
   */
  readonly mode?: NatsPublishMode;
}

/** The options as the publisher uses them: checked, defaults applied, frozen. */
export interface ResolvedNatsOptions {
  /** Exactly one of `url` and `client` is set. */
  readonly url: string | string[] | undefined;
  readonly client: NatsConnection | undefined;
  readonly clientOptions: Omit<NodeConnectionOptions, 'servers'> | undefined;
  readonly stream: string | undefined;
  readonly streamSubjects: readonly string[] | undefined;
  readonly dedupWindowMs: number;
  readonly destination: (message: OutboxMessage) => string;
  readonly source: string;
  readonly timeoutMs: number;
  readonly maxInFlight: number;
  /** `mode` is `pipeline`. */
  readonly pipelined: boolean;
  /** The server(s) as error messages name them: URLs without passwords or query values. */
  readonly where: string;
}

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_DEDUP_WINDOW_MS = 120_000;
const DEFAULT_MAX_IN_FLIGHT = 1024;

/** Old spellings of the options (accepted with a DeprecationWarning). */
const RENAMED = {
  servers: 'url',
  connection: 'client',
  connectionOptions: 'clientOptions',
  subject: 'destination',
  duplicateWindowMs: 'dedupWindowMs',
  source: 'ceSource',
} as const;

/** Checks `options` (errors name the option and the fix) and applies the defaults. */
export function resolveNatsOptions(given: NatsPublisherOptions): ResolvedNatsOptions {
  const options = renamedOptions('natsPublisher', given, RENAMED);
  validate(options);
  const { url } = options;
  return Object.freeze({
    url,
    client: options.client,
    clientOptions: options.clientOptions,
    stream: options.stream,
    streamSubjects: options.streamSubjects,
    dedupWindowMs: options.dedupWindowMs ?? DEFAULT_DEDUP_WINDOW_MS,
    destination: destinationOption(given, 'subject', options.destination, defaultDestination),
    source: ceSourceOption(given, options.ceSource),
    timeoutMs: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    maxInFlight: options.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT,
    pipelined: (options.mode ?? 'pipeline') === 'pipeline',
    where: url === undefined ? 'the given connection' : redactServers(url),
  });
}

function validate(options: NatsPublisherOptions): void {
  const hasUrl = options.url !== undefined && options.url.length > 0;
  checkUrlOrClient({ hasUrl, hasClient: options.client !== undefined, urlExample: 'URL or URLs' });
  if (options.streamSubjects !== undefined && options.stream === undefined) {
    throw new OutboxValidationError('stream', 'is missing', 'Name the stream that `streamSubjects` describe');
  }
  if (options.streamSubjects !== undefined && options.streamSubjects.length === 0) {
    throw new OutboxValidationError('streamSubjects', 'is empty', 'List at least one subject or omit it');
  }
  checkPositiveInteger('timeoutMs', options.timeoutMs);
  checkPositiveInteger('maxInFlight', options.maxInFlight);
  checkPositiveInteger('dedupWindowMs', options.dedupWindowMs);
  if (options.mode !== undefined && options.mode !== 'pipeline' && options.mode !== 'client') {
    throw new OutboxValidationError(
      'mode',
      `must be 'pipeline' or 'client', got ${String(options.mode)}`,
      'Fix the option',
    );
  }
}

/** Server URLs for an error message, without passwords or query values. */
function redactServers(servers: string | string[]): string {
  const list = typeof servers === 'string' ? [servers] : servers;
  return list.map(redactUrl).join(', ');
}
