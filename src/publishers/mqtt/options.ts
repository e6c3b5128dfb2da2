/** The MQTT publisher's options: the public shape, and their resolution (renames, checks, defaults) into one frozen object. */
import type { IClientOptions, MqttClient } from 'mqtt';
import { ceSourceOption } from '../../envelope/ce-source.js';
import { OutboxValidationError } from '../../errors.js';
import { checkUrlOrClient, positiveInteger } from '../../options/checks.js';
import { renamedOptions } from '../../options/renamed.js';
import type { OutboxMessage } from '../contract.js';
import { destinationOption } from '../core/destination.js';
import { defaultTopic } from './topic.js';

/** Options of {@link mqttPublisher}. Give `url` or an existing `client`. */
export interface MqttPublisherOptions {
  /** Broker URL, e.g. `mqtt://127.0.0.1:1883` or `mqtts://…`. The publisher owns (and ends) this client. */
  readonly url?: string;
  /**
   * An existing MQTT.js client to publish on instead of `url`; the publisher never ends it. Its
   * `protocolVersion` decides the wire format (5: user properties; 3.1.1: structured JSON).
   */
  readonly client?: MqttClient;
  /** Extra MQTT.js options for the client made from `url` (auth, TLS, clientId, reconnectPeriod …). */
  readonly clientOptions?: Omit<IClientOptions, 'protocolVersion'>;
  /**
   * Topic of a message. Default: `message.topic` as given, else `${aggregateType}/${type}` with
   * every dot turned into a slash (`order` + `order.created` → `order/order/created`).
   */
  readonly destination?: (message: OutboxMessage) => string;
  /** @deprecated Use `destination`. */
  readonly topic?: (message: OutboxMessage) => string;
  /** 1 (default) or 2. QoS 0 is refused: nothing would say the broker has the message. */
  readonly qos?: 1 | 2;
  /**
   * 5 (default) or 4 (MQTT 3.1.1). With 5 and a broker that refuses it, publishes fail as
   * broker-unavailable with an error that says so (nothing is charged an attempt, nothing is
   * sent in another format). With 4 the payload is a CloudEvents structured JSON document:
   * `{"specversion":"1.0","id":…,…,"data":<the JSON payload>}` (or `"data_base64"` for bytes),
   * and a user header whose name is not a CloudEvents attribute name (`[a-z0-9]+` once
   * lower-cased, e.g. `traceparent`) fails its message permanently rather than being dropped.
   */
  readonly protocolVersion?: 4 | 5;
  /**
   * CloudEvents `source` attribute: a URI-reference (`https://orders.example.com`,
   * `urn:example:orders`, `/orders`). Default `tx-outbox`.
   */
  readonly ceSource?: string;
  /** @deprecated Use `ceSource`. */
  readonly source?: string;
  /** Deadline for connecting and for each PUBACK, in ms. Default 10 000. */
  readonly timeoutMs?: number;
  /**
   * Upper bound of publishes awaiting their PUBACK, across concurrent batches. Default 1024, at
   * most 65 535 (packet identifiers). An MQTT 5 broker's Receive Maximum lowers it further
   * (Mosquitto announces 20 unless `max_inflight_messages` says otherwise).
   */
  readonly maxInFlight?: number;
}

/** {@link MqttPublisherOptions} checked, with every default filled in (frozen). */
export interface MqttResolved {
  readonly url: string | undefined;
  readonly client: MqttClient | undefined;
  readonly clientOptions: Omit<IClientOptions, 'protocolVersion'>;
  readonly destination: (message: OutboxMessage) => string;
  readonly qos: 1 | 2;
  readonly protocolVersion: 4 | 5;
  readonly source: string;
  readonly timeoutMs: number;
  readonly maxInFlight: number;
}

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_IN_FLIGHT = 1024;
/** MQTT packet identifiers: at most this many QoS 1/2 publishes can await their answer. */
export const MAX_PACKET_IDS = 65_535;

/** Old spellings of the MQTT publisher's options (see src/options/renamed.ts). */
const RENAMES = { topic: 'destination', source: 'ceSource' } as const;

/**
 * Resolves `given` once: old spellings moved to their new names (one DeprecationWarning each),
 * every option checked (the error names the option and the fix), the defaults filled in.
 * @throws OutboxValidationError when an option is invalid.
 */
export function resolveMqttOptions(given: MqttPublisherOptions): MqttResolved {
  const options = renamedOptions('mqttPublisher', given, RENAMES);
  const hasUrl = typeof options.url === 'string' && options.url.length > 0;
  checkConnection(options, hasUrl);
  checkWire(options);
  // Named as given: an invalid `topic` (old spelling) is reported as `topic`.
  const destination = destinationOption(given, 'topic', options.destination, defaultTopic);
  const source = ceSourceOption(given, options.ceSource);
  const timeoutMs = positiveInteger('timeoutMs', options.timeoutMs, DEFAULT_TIMEOUT_MS);
  const maxInFlight = positiveInteger('maxInFlight', options.maxInFlight, DEFAULT_MAX_IN_FLIGHT);
  if (maxInFlight > MAX_PACKET_IDS) {
    throw new OutboxValidationError(
      'maxInFlight',
      `must be at most ${MAX_PACKET_IDS} (MQTT packet identifiers), got ${maxInFlight}`,
      'Lower it',
    );
  }
  const clientVersion = options.client?.options.protocolVersion;
  return Object.freeze({
    url: hasUrl ? options.url : undefined,
    client: options.client,
    clientOptions: options.clientOptions ?? {},
    destination,
    qos: options.qos ?? 1,
    protocolVersion:
      options.client === undefined ? (options.protocolVersion ?? 5) : clientVersion === 5 ? 5 : 4,
    source,
    timeoutMs,
    maxInFlight,
  });
}

/** Exactly one of `url` (a URL) and `client`; `clientOptions` only with `url`. */
function checkConnection(options: MqttPublisherOptions, hasUrl: boolean): void {
  if (hasUrl && !URL.canParse(options.url!)) {
    throw new OutboxValidationError(
      'url',
      'is not a URL',
      'Give e.g. mqtt://127.0.0.1:1883 or mqtts://broker:8883',
    );
  }
  checkUrlOrClient({
    hasUrl,
    hasClient: options.client !== undefined,
    hasClientOptions: options.clientOptions !== undefined,
    urlExample: 'e.g. mqtt://127.0.0.1:1883',
  });
}

/** QoS 1 or 2; protocol version 5 or 4, and none with `client` (the client's own applies). */
function checkWire(options: MqttPublisherOptions): void {
  if (options.qos !== undefined && options.qos !== 1 && options.qos !== 2) {
    throw new OutboxValidationError(
      'qos',
      `must be 1 or 2, got ${String(options.qos)}`,
      'QoS 0 has no acknowledgement; use 1',
    );
  }
  if (
    options.protocolVersion !== undefined &&
    options.protocolVersion !== 4 &&
    options.protocolVersion !== 5
  ) {
    throw new OutboxValidationError(
      'protocolVersion',
      `must be 5 or 4 (MQTT 3.1.1), got ${String(options.protocolVersion)}`,
      'Fix the option',
    );
  }
  if (options.client !== undefined && options.protocolVersion !== undefined) {
    throw new OutboxValidationError(
      'protocolVersion',
      'was given together with `client`',
      "The client's own protocolVersion applies; omit it",
    );
  }
}
