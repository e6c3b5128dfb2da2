/**
 * MQTT publisher on MQTT.js 5.x (optional peer dependency `mqtt`). Every message is a QoS 1
 * (or 2) PUBLISH whose outcome waits for the broker's PUBACK (PUBCOMP); many are in flight at
 * once on one connection, sent in batch order, so messages of one topic keep their order.
 *
 * MQTT 5 (default): the CloudEvents envelope travels as user properties, the payload bytes are
 * sent untouched with the message's `contentType` (and the UTF-8 payload format indicator for
 * JSON). MQTT 3.1.1 has no properties: with `protocolVersion: 4` every message is a CloudEvents
 * structured-mode JSON document instead (the only mode the CloudEvents MQTT 3.1.1 binding has).
 * A broker that refuses MQTT 5 is never silently answered with a different wire format.
 */
import {
  connect,
  type IClientOptions,
  type IClientPublishOptions,
  type IConnackPacket,
  type IDisconnectPacket,
  type MqttClient,
  ReasonCodes,
} from 'mqtt';
import { BROKER_UNAVAILABLE, errorMessage, OutboxValidationError, PublishError } from '../errors.js';
import { positiveInteger } from '../options/checks.js';
import { redactUrl } from '../redact.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from './contract.js';
import { abortError } from './core/abort-watch.js';
import { BatchRun } from './core/batch-run.js';
import { asBuffer } from './core/bytes.js';
import { publisherClosed } from './core/closed.js';
import { DeadlineSweep } from './core/deadline-sweep.js';
import { LinkActivity } from './core/link-activity.js';
import { permanent } from './core/outcomes.js';
import { envelopeHeaders } from './envelope.js';

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
  /** CloudEvents `source` attribute. Default `tx-outbox`. */
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

interface Resolved {
  readonly url: string | undefined;
  readonly client: MqttClient | undefined;
  readonly clientOptions: Omit<IClientOptions, 'protocolVersion'>;
  readonly topic: (message: OutboxMessage) => string;
  readonly qos: 1 | 2;
  readonly protocolVersion: 4 | 5;
  readonly source: string;
  readonly timeoutMs: number;
  readonly maxInFlight: number;
}

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_MAX_IN_FLIGHT = 1024;
const MAX_PACKET_IDS = 65_535;
/** The largest remaining length an MQTT packet can declare (4-byte variable byte integer). */
const MAX_REMAINING_LENGTH = 268_435_455;
const MAX_STRING_BYTES = 65_535;

/**
 * PUBACK / PUBREC reason codes a retry cannot cure. MQTT 5 does not list 0x95 (packet too large)
 * for PUBACK — brokers send it as a DISCONNECT, see below — but a broker that does gets the same verdict.
 */
const PERMANENT_REASONS: ReadonlySet<number> = new Set([0x87, 0x90, 0x95, 0x99]);
/**
 * Server DISCONNECT reason codes that blame what was sent, not the broker's health: in-flight
 * messages then fail as ordinary retryable failures (charged an attempt), so a message that
 * makes the broker hang up cannot be retried forever for free.
 */
const MESSAGE_FAULT_DISCONNECTS: ReadonlySet<number> = new Set([0x81, 0x82, 0x87, 0x90, 0x95, 0x99]);
/** CONNACK codes of a broker that does not speak the requested protocol version. */
const UNSUPPORTED_VERSION: ReadonlySet<number> = new Set([0x01, 0x84]);

/**
 * The `topic` option's default: `message.topic`, else `${aggregateType}/${type}` with dots turned
 * into slashes.
 */
export function defaultTopic(message: OutboxMessage): string {
  return message.topic !== null && message.topic !== ''
    ? message.topic
    : `${message.aggregateType}/${message.type}`.replaceAll('.', '/');
}

/**
 * Characters MQTT strings must not (NUL, lone surrogates) or should not (control characters,
 * noncharacters) contain; Mosquitto drops the connection on any of them.
 */
const BAD_CHARACTER = /[\p{Cc}\p{Cs}\p{Noncharacter_Code_Point}]/u;

/** Why `value` cannot be an MQTT UTF-8 string, or undefined when it can. */
function stringProblem(value: string): string | undefined {
  if (BAD_CHARACTER.test(value)) {
    if (value.includes('\u0000')) return 'contains a NUL character';
    if (/\p{Cs}/u.test(value)) return 'is not well-formed Unicode (a lone surrogate)';
    if (/\p{Cc}/u.test(value)) return 'contains a control character (U+0001–U+001F, U+007F–U+009F)';
    return 'contains a Unicode noncharacter (e.g. U+FFFF)';
  }
  // UTF-8 takes at most 3 bytes per UTF-16 code unit.
  if (value.length * 3 > MAX_STRING_BYTES) {
    const bytes = Buffer.byteLength(value);
    if (bytes > MAX_STRING_BYTES) return `is ${bytes} bytes long in UTF-8; MQTT allows ${MAX_STRING_BYTES}`;
  }
  return undefined;
}

/** Topics already found fine: a relay publishes on few topics, over and over. */
const validTopics = new Set<string>();

/** Why an MQTT broker would refuse (or drop the connection over) a PUBLISH to `topic`, or undefined. */
export function topicProblem(topic: string): string | undefined {
  if (validTopics.has(topic)) return undefined;
  let problem: string | undefined;
  if (topic.length === 0) problem = 'is empty';
  else if (topic.includes('+') || topic.includes('#')) {
    problem = 'contains a wildcard (+ or #), which only subscriptions may use';
  } else problem = stringProblem(topic);
  if (problem === undefined) {
    if (validTopics.size >= 4096) validTopics.clear();
    validTopics.add(topic);
  }
  return problem;
}

/**
 * A {@link Publisher} for MQTT (name `mqtt`). With `url`, the client is created at the first
 * publish and then reconnects on its own (MQTT.js `reconnectPeriod`, default 1 s); a publisher
 * created while the broker is down starts working as soon as it is back.
 *
 * Outcomes: a message is delivered when the broker's PUBACK (QoS 2: PUBCOMP) says success
 * (`0x10 no matching subscribers` included: MQTT brokers keep nothing for a topic nobody
 * subscribed to). Permanent: a topic that is empty, has a wildcard `+`/`#`, a NUL, a control
 * character or a noncharacter, or is over 65 535 bytes; a header MQTT cannot carry; a packet
 * over the broker's Maximum Packet Size — all decided before sending — and a PUBACK with reason
 * `not authorized`, `topic name invalid` or `payload format invalid` (or `packet too large`).
 * Retryable: any other failure reason, a missing PUBACK within `timeoutMs`, an aborted batch.
 * Broker unavailable (retryable, `BROKER_UNAVAILABLE`, no attempt charged): not connected
 * (publishes fail at once instead of queueing offline; while a connection attempt is under way
 * they wait for it, at most `timeoutMs`), the connection lost before the PUBACK, a broker that
 * refuses the connection or MQTT 5. Except when the broker hung up with a DISCONNECT that blames
 * what was sent (malformed packet, protocol error, not authorized, topic name invalid, packet too
 * large, payload format invalid): then in-flight messages fail as plain retryable, so a message
 * that makes the broker hang up is charged its attempts and ends dead instead of looping forever.
 *
 * Throughput: at most min(`maxInFlight`, the broker's Receive Maximum) PUBLISHes await their PUBACK.
 * On Mosquitto, `set_tcp_nodelay true` removes a ~40 ms stall at the end of every batch (its last
 * PUBACK waits for the client's delayed TCP ACK under Nagle).
 *
 * A message whose PUBACK never came (timeout, lost connection) is removed from MQTT.js's
 * outgoing store, so the client does not resend it on reconnect: the relay republishes it.
 * Consumers dedup on the envelope's `ce-id` either way (MQTT has no broker-side dedup).
 *
 * `close()` is idempotent: unsent messages fail as retryable, messages in flight get their
 * PUBACK or fail within `timeoutMs`, then a client made from `url` is ended. Later publishes
 * reject with an OutboxError `TXO_PUBLISHER_CLOSED`.
 *
 * @example
 * const publisher = mqttPublisher({ url: 'mqtt://127.0.0.1:1883' });
 * @throws OutboxValidationError when an option is invalid (names the option and the fix).
 */
export function mqttPublisher(options: MqttPublisherOptions): Publisher {
  return new MqttPublisher(resolveOptions(options));
}

function resolveOptions(options: MqttPublisherOptions): Resolved {
  const hasUrl = typeof options.url === 'string' && options.url.length > 0;
  if (!hasUrl && options.client === undefined) {
    throw new OutboxValidationError(
      'url',
      'is missing',
      'Give `url` (e.g. mqtt://127.0.0.1:1883) or a `client`',
    );
  }
  if (hasUrl && !URL.canParse(options.url!)) {
    throw new OutboxValidationError(
      'url',
      'is not a URL',
      'Give e.g. mqtt://127.0.0.1:1883 or mqtts://broker:8883',
    );
  }
  if (hasUrl && options.client !== undefined) {
    throw new OutboxValidationError('client', 'was given together with `url`', 'Give only one of them');
  }
  if (options.client !== undefined && options.clientOptions !== undefined) {
    throw new OutboxValidationError(
      'clientOptions',
      'only apply to a client made from `url`',
      'Configure your own client yourself',
    );
  }
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
  if (options.topic !== undefined && typeof options.topic !== 'function') {
    throw new OutboxValidationError('topic', 'must be a function (message) => string', 'Fix the option');
  }
  if (options.source !== undefined && (typeof options.source !== 'string' || options.source === '')) {
    throw new OutboxValidationError('source', 'must be a non-empty string', 'Fix the option');
  }
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
    topic: options.topic ?? defaultTopic,
    qos: options.qos ?? 1,
    protocolVersion:
      options.client === undefined ? (options.protocolVersion ?? 5) : clientVersion === 5 ? 5 : 4,
    source: options.source ?? 'tx-outbox',
    timeoutMs,
    maxInFlight,
  });
}

// --- messages ready to send ------------------------------------------------------------------

/** A message that passed every check that can be made before connecting. */
interface Prepared {
  readonly topic: string;
  readonly payload: Buffer;
  readonly options: IClientPublishOptions;
  /** An upper bound of the PUBLISH packet's size; the exact size is computed only when it matters. */
  readonly maxBytes: number;
}

function isPrepared(item: Prepared | PublishOutcome): item is Prepared {
  return 'topic' in item;
}

/** Bytes a variable byte integer takes. */
function varIntBytes(value: number): number {
  return value < 128 ? 1 : value < 16_384 ? 2 : value < 2_097_152 ? 3 : 4;
}

/** The exact size of the PUBLISH packet MQTT.js will write for `item` (no topic alias). */
function packetBytes(item: Prepared): number {
  let remaining = 2 + Buffer.byteLength(item.topic) + 2 + item.payload.length;
  const properties = item.options.properties;
  if (properties !== undefined) {
    let length = 0;
    if (properties.contentType !== undefined) length += 3 + Buffer.byteLength(properties.contentType);
    if (properties.payloadFormatIndicator !== undefined) length += 2;
    for (const [name, value] of Object.entries(properties.userProperties ?? {})) {
      for (const v of Array.isArray(value) ? value : [value]) {
        length += 5 + Buffer.byteLength(name) + Buffer.byteLength(v);
      }
    }
    remaining += varIntBytes(length) + length;
  }
  return 1 + varIntBytes(remaining) + remaining;
}

const RESERVED_ATTRIBUTES: ReadonlySet<string> = new Set(['data', 'data_base64']);

/**
 * MQTT 3.1.1: the CloudEvents structured-mode JSON document carrying the envelope and the payload
 * (`data` = the JSON payload text, embedded untouched; `data_base64` = bytes), or why not.
 */
function structuredPayload(message: OutboxMessage, source: string): Buffer | string {
  const event: Record<string, string> = {};
  const headers = envelopeHeaders(message, source);
  for (const name in headers) {
    if (name.startsWith('ce-')) continue;
    const attribute = name.toLowerCase();
    if (!/^[a-z0-9]+$/.test(attribute) || RESERVED_ATTRIBUTES.has(attribute)) {
      return (
        `header "${name}" is not a CloudEvents attribute name ([a-z0-9]+) and MQTT 3.1.1 has no user ` +
        'properties to carry it: rename the header or publish with protocolVersion 5'
      );
    }
    event[attribute] = headers[name]!;
  }
  for (const name in headers) if (name.startsWith('ce-')) event[name.slice(3)] = headers[name]!;
  const head = JSON.stringify(event).slice(0, -1);
  const payload = asBuffer(message.payload);
  if (message.contentType !== 'application/json') {
    return Buffer.from(`${head},"data_base64":"${payload.toString('base64')}"}`);
  }
  const text = payload.toString('utf8');
  try {
    JSON.parse(text);
  } catch (error) {
    return `its application/json payload is not valid JSON (${errorMessage(error)})`;
  }
  return Buffer.from(`${head},"data":${text}}`);
}

// --- outcomes --------------------------------------------------------------------------------

function retryable(message: string, cause?: unknown): PublishOutcome {
  return failed(new PublishError(message, { retryable: true, cause }), true);
}

function unavailable(message: string, cause?: unknown): PublishOutcome {
  return failed(new PublishError(message, { retryable: true, code: BROKER_UNAVAILABLE, cause }), true);
}

function reasonName(code: number): string {
  const name = (ReasonCodes as Record<number, string | undefined>)[code];
  return `0x${code.toString(16).padStart(2, '0')}${name ? ` ${name.toLowerCase()}` : ''}`;
}

/** A topic for error messages: quoted and escaped, and cut when long. */
function show(topic: string): string {
  return JSON.stringify(topic.length > 200 ? `${topic.slice(0, 200)}…` : topic);
}

/** The verdict on a PUBACK (PUBREC, PUBCOMP) carrying a failure reason code. */
function refusal(code: number, topic: string, cause: unknown): PublishOutcome {
  const message = `The MQTT broker refused the publish to ${show(topic)}: reason ${reasonName(code)}`;
  return PERMANENT_REASONS.has(code) ? permanent(message, cause) : retryable(message, cause);
}

// --- one publish() call ----------------------------------------------------------------------

/** One `publish()` call, and where it is sent. */
class Run extends BatchRun<Prepared> {
  /** The connected client it sends on, once there is one. */
  client: MqttClient | undefined;
  /** Largest PUBLISH the broker accepts, in bytes. */
  maxPacket = Number.POSITIVE_INFINITY;
}

/** A PUBLISH awaiting its PUBACK. */
interface Pending {
  readonly run: Run;
  readonly index: number;
  readonly topic: string;
  readonly deadline: number;
  /** What was heard from the broker when it was sent (see LinkActivity). */
  readonly mark: number;
  readonly client: MqttClient;
  /** MQTT packet identifier, or -1 when MQTT.js queued the publish (id not known yet). */
  messageId: number;
}

/** The client events the publisher follows, kept to detach them from a client it does not own. */
type Listeners = {
  readonly connect: (packet: IConnackPacket) => void;
  readonly close: () => void;
  readonly reconnect: () => void;
  readonly error: (error: Error) => void;
  readonly disconnect: (packet: IDisconnectPacket) => void;
  readonly packetreceive: () => void;
};

class MqttPublisher implements Publisher {
  readonly name = 'mqtt';
  readonly #options: Resolved;
  readonly #owned: boolean;
  #client: MqttClient | undefined;
  #listeners: Listeners | undefined;
  /** True while a connection attempt is under way: publishes wait for it instead of failing. */
  #attempting = false;
  #lastError: Error | undefined;
  /** Reason code of the server's DISCONNECT on the current connection, if it sent one. */
  #serverDisconnect: number | undefined;
  /** Publishes waiting for a connection attempt to end. */
  readonly #readyWaiters = new Set<() => void>();
  /** Our publishes awaiting their PUBACK, by token, in send order (= deadline order). */
  readonly #pending = new Map<number, Pending>();
  /** Fails the publishes past their deadline (no PUBACK within timeoutMs). */
  readonly #sweep = new DeadlineSweep(
    this.#pending,
    (p) => {
      const late = `Timed out after ${this.#options.timeoutMs} ms waiting for the PUBACK of ${show(p.topic)}`;
      // A broker silent since the publish leaves the link in doubt: its fault, not the event's.
      p.run.settle(
        p.index,
        this.#activity.silentSince(p.mark)
          ? unavailable(
              `${late}; nothing heard from the broker since it was sent: the connection is in doubt`,
            )
          : retryable(late),
      );
      forget(p);
    },
    () => this.#released(),
  );
  /** Every packet the broker sends counts: PUBACKs, PINGRESPs … */
  readonly #activity = new LinkActivity();
  #counter = 0;
  /** Runs with messages left to send, waiting for room, first come first served. */
  readonly #waiting: Run[] = [];
  /** True while #wake sends: a slot freed meanwhile is used by its loop, not by a nested one. */
  #pumping = false;
  /** maxInFlight, lowered to the broker's Receive Maximum. */
  #capacity: number;
  readonly #runs = new Set<Run>();
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(options: Resolved) {
    this.#options = options;
    this.#owned = options.client === undefined;
    this.#capacity = options.maxInFlight;
    if (options.client !== undefined) this.#attach(options.client);
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    if (this.#closed) {
      throw publisherClosed('MQTT');
    }
    const run = new Run(batch.map((message) => this.#prepareSafely(message)));
    if (run.done) return run.promise;
    this.#runs.add(run);
    const onAbort = (): void => this.#stop(run, signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    try {
      const ready = await this.#ready(signal);
      if (!run.done) {
        if (ready instanceof MqttPublisherClient) this.#start(run, ready.client);
        else
          run.settleRest(
            0,
            () => ready,
            () => ready,
          );
      }
    } catch (error) {
      const outcome = retryable(`Publish failed: ${errorMessage(error)}`, error);
      run.settleRest(
        0,
        () => outcome,
        () => outcome,
      );
    }
    try {
      return await run.promise;
    } finally {
      signal.removeEventListener('abort', onAbort);
      this.#runs.delete(run);
    }
  }

  close(): Promise<void> {
    this.#closing ??= this.#shutdown();
    return this.#closing;
  }

  /** {@link #prepare}, with anything it throws (an invalid `createdAt` …) as the message's permanent failure. */
  #prepareSafely(message: OutboxMessage): Prepared | PublishOutcome {
    try {
      return this.#prepare(message);
    } catch (error) {
      return permanent(`Event ${message.eventId} cannot be published: ${errorMessage(error)}`, error);
    }
  }

  /** Topic, headers and payload; a message MQTT cannot carry gets its permanent outcome here. */
  #prepare(message: OutboxMessage): Prepared | PublishOutcome {
    let topic: string;
    try {
      topic = this.#options.topic(message);
    } catch (error) {
      return permanent(
        `The topic function threw for event ${message.eventId}: ${errorMessage(error)}`,
        error,
      );
    }
    if (typeof topic !== 'string') {
      return permanent(`The topic function returned a ${typeof topic} for event ${message.eventId}`);
    }
    const problem = topicProblem(topic);
    if (problem !== undefined) {
      return permanent(`MQTT topic ${show(topic)} of event ${message.eventId} is invalid: it ${problem}`);
    }
    const { qos, source } = this.#options;
    if (this.#options.protocolVersion === 4) {
      const payload = structuredPayload(message, source);
      if (typeof payload === 'string') {
        return permanent(`Event ${message.eventId} cannot be published over MQTT 3.1.1: ${payload}`);
      }
      return { topic, payload, options: { qos }, maxBytes: 9 + topic.length * 3 + payload.length };
    }
    const userProperties = envelopeHeaders(message, source);
    let chars = topic.length + message.contentType.length;
    for (const name in userProperties) {
      const value = userProperties[name]!;
      const bad = stringProblem(name) ?? stringProblem(value);
      if (bad !== undefined) {
        return permanent(
          `Header ${show(name)} of event ${message.eventId} cannot travel as an MQTT user property: ` +
            `its ${stringProblem(name) === undefined ? 'value' : 'name'} ${bad}`,
        );
      }
      chars += name.length + value.length + 2;
    }
    const json = message.contentType === 'application/json';
    const payload = asBuffer(message.payload);
    const properties: NonNullable<IClientPublishOptions['properties']> = json
      ? { userProperties, contentType: message.contentType, payloadFormatIndicator: true }
      : { userProperties, contentType: message.contentType };
    return { topic, payload, options: { qos, properties }, maxBytes: 32 + chars * 3 + payload.length };
  }

  // --- connection --------------------------------------------------------------------------

  /** The connected client, or the outcome every message of the batch gets when there is none. */
  async #ready(signal: AbortSignal): Promise<MqttPublisherClient | PublishOutcome> {
    let client: MqttClient;
    try {
      client = this.#client ?? this.#connect();
    } catch (error) {
      return unavailable(`Cannot create the MQTT client for ${this.#where()}: ${errorMessage(error)}`, error);
    }
    if (!client.connected && this.#attempting && !this.#closed && !signal.aborted) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          this.#readyWaiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, this.#options.timeoutMs);
        signal.addEventListener('abort', done, { once: true });
        this.#readyWaiters.add(done);
      });
    }
    if (this.#closed) return retryable('The MQTT publisher was closed before the batch was sent');
    if (client.connected && !client.disconnecting) return new MqttPublisherClient(client);
    return this.#unavailable();
  }

  #connect(): MqttClient {
    const { url, clientOptions, protocolVersion, timeoutMs } = this.#options;
    const client = connect(url!, {
      connectTimeout: timeoutMs,
      reconnectPeriod: 1000,
      reconnectOnConnackError: true,
      queueQoSZero: false,
      resubscribe: false,
      ...clientOptions,
      protocolVersion,
    });
    this.#attach(client);
    this.#attempting = true;
    return client;
  }

  #attach(client: MqttClient): void {
    this.#client = client;
    this.#attempting = !client.connected && !client.disconnecting;
    if (client.connected) this.#connected();
    const listeners: Listeners = {
      connect: () => this.#connected(),
      close: () => this.#connectionClosed(),
      reconnect: () => {
        this.#attempting = true;
      },
      // Errors are kept for the outcomes they explain; MQTT.js reconnects on its own.
      error: (error) => {
        this.#lastError = error;
      },
      disconnect: (packet) => {
        this.#serverDisconnect = packet.reasonCode ?? 0;
      },
      packetreceive: () => this.#activity.heard(),
    };
    this.#listeners = listeners;
    client.on('connect', listeners.connect);
    client.on('close', listeners.close);
    client.on('reconnect', listeners.reconnect);
    client.on('error', listeners.error);
    client.on('disconnect', listeners.disconnect);
    client.on('packetreceive', listeners.packetreceive);
  }

  #connected(): void {
    const client = this.#client!;
    this.#attempting = false;
    this.#lastError = undefined;
    this.#serverDisconnect = undefined;
    const receiveMaximum =
      client.options.protocolVersion === 5 ? client.serverProperties?.receiveMaximum : undefined;
    this.#capacity = Math.min(this.#options.maxInFlight, receiveMaximum ?? MAX_PACKET_IDS);
    this.#notifyReady();
    this.#wake();
  }

  /**
   * The connection is gone: every publish awaiting its PUBACK fails now, and is dropped from
   * MQTT.js's store so the client does not resend it after reconnecting (the relay will).
   */
  #connectionClosed(): void {
    this.#attempting = false;
    const reason = this.#serverDisconnect;
    const where = this.#where();
    const blamed = reason !== undefined && MESSAGE_FAULT_DISCONNECTS.has(reason);
    this.#failPending((topic) => {
      const message =
        `Publish to ${show(topic)} lost its PUBACK: the connection to the MQTT broker (${where}) closed` +
        (reason === undefined ? '' : ` (server DISCONNECT, reason ${reasonName(reason)})`);
      return blamed ? retryable(message) : unavailable(message, this.#lastError);
    });
    this.#wake();
    this.#notifyReady();
  }

  #notifyReady(): void {
    for (const done of [...this.#readyWaiters]) done();
  }

  /** Why there is no connection, as the broker-unavailable outcome of every message. */
  #unavailable(): PublishOutcome {
    const error = this.#lastError;
    const code = (error as { code?: unknown } | undefined)?.code;
    const where = this.#where();
    if (this.#options.protocolVersion === 5 && typeof code === 'number' && UNSUPPORTED_VERSION.has(code)) {
      return unavailable(
        `The MQTT broker (${where}) refuses MQTT 5 (${errorMessage(error)}). The envelope travels in MQTT 5 ` +
          'user properties; publish with protocolVersion: 4 (CloudEvents structured JSON payloads) or upgrade the broker',
        error,
      );
    }
    const detail = error === undefined ? 'not connected' : errorMessage(error);
    return unavailable(`The MQTT broker is not available (${where}): ${detail}`, error);
  }

  #where(): string {
    const { url } = this.#options;
    return url === undefined ? 'the given client' : redactUrl(url);
  }

  // --- sending -----------------------------------------------------------------------------

  /** Queues the run for sending on `client` and sends what fits. */
  #start(run: Run, client: MqttClient): void {
    run.client = client;
    const brokerMax =
      client.options.protocolVersion === 5 ? client.serverProperties?.maximumPacketSize : undefined;
    run.maxPacket = Math.min(1 + 4 + MAX_REMAINING_LENGTH, brokerMax ?? Number.POSITIVE_INFINITY);
    this.#waiting.push(run);
    this.#wake();
  }

  /**
   * Lets waiting runs send, oldest first, while there is room. It runs synchronously, also from
   * inside a PUBACK callback: the freed slot is refilled at once, as a hand-written MQTT.js loop
   * would, instead of after a promise hop (MQTT.js handles each incoming packet in its own
   * `process.nextTick`, so promise continuations would only run once a whole burst of PUBACKs
   * was handled, draining the window each time).
   */
  #wake(): void {
    if (this.#pumping) return;
    this.#pumping = true;
    try {
      while (this.#waiting.length > 0 && (this.#pending.size < this.#capacity || this.#mustStop())) {
        this.#pump(this.#waiting.shift()!);
      }
    } finally {
      this.#pumping = false;
    }
  }

  /** True when waiting runs must give up: closed, or the connection is gone. */
  #mustStop(): boolean {
    const client = this.#client;
    return this.#closed || client === undefined || !client.connected || client.disconnecting;
  }

  /** Sends the run's messages in batch order until it is done or the window is full (then it waits again). */
  #pump(run: Run): void {
    const client = run.client!;
    if (run.done || this.#cannotSend(run, client)) return;
    const { items } = run;
    const now = performance.now();
    while (run.next < items.length && !run.done) {
      const i = run.next;
      const item = items[i]!;
      if (!isPrepared(item) || run.outcomes[i] !== undefined) {
        run.next = i + 1;
        continue;
      }
      if (item.maxBytes > run.maxPacket) {
        const bytes = packetBytes(item);
        if (bytes > run.maxPacket) {
          run.next = i + 1;
          run.settle(
            i,
            permanent(
              `The PUBLISH to ${show(item.topic)} would be ${bytes} bytes; the MQTT broker accepts at most ${run.maxPacket}`,
            ),
          );
          continue;
        }
      }
      if (this.#pending.size >= this.#capacity) {
        this.#waiting.push(run);
        return;
      }
      run.next = i + 1;
      this.#send(run, i, item, client, now);
    }
  }

  /** When closed or disconnected, settles the run's unsent items and says so. */
  #cannotSend(run: Run, client: MqttClient): boolean {
    if (!this.#closed && client === this.#client && client.connected && !client.disconnecting) return false;
    const outcome = this.#closed
      ? retryable('The MQTT publisher was closed before this message was sent')
      : this.#unavailable();
    // Items already sent are settled by their PUBACK, their timeout or the lost connection.
    run.settleRest(
      run.next,
      () => outcome,
      () => outcome,
    );
    return true;
  }

  #send(run: Run, index: number, item: Prepared, client: MqttClient, now: number): void {
    const token = this.#counter;
    this.#counter = token >= 0x3fffffff ? 0 : token + 1;
    const entry: Pending = {
      run,
      index,
      topic: item.topic,
      deadline: now + this.#options.timeoutMs,
      mark: this.#activity.mark(),
      client,
      messageId: -1,
    };
    this.#pending.set(token, entry);
    // MQTT.js calls back with `null` (or nothing) on success.
    const callback = (error?: Error | null): void => this.#onAck(token, error ?? undefined);
    client.publish(item.topic, item.payload, item.options, callback);
    if (this.#pending.get(token) === entry) {
      // Sent at once (not queued behind the client's store replay): remember its packet id.
      const id = client.getLastMessageId();
      if (client.outgoing[id]?.cb === callback) entry.messageId = id;
    }
    this.#sweep.added(this.#options.timeoutMs);
  }

  #onAck(token: number, error: Error | undefined): void {
    const pending = this.#pending.get(token);
    if (pending === undefined) return; // late: it timed out or the connection dropped meanwhile
    this.#pending.delete(token);
    pending.run.settle(pending.index, error === undefined ? DELIVERED : this.#failure(error, pending.topic));
    this.#released();
  }

  #failure(error: Error, topic: string): PublishOutcome {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'number' && code >= 0x80) return refusal(code, topic, error);
    // 'Connection closed', 'client disconnecting' …: the client gave up on the message.
    return unavailable(`Publish to ${show(topic)} failed: ${errorMessage(error)} (${this.#where()})`, error);
  }

  /** The batch's signal aborted: its open messages fail now (their slots free on PUBACK or timeout). */
  #stop(run: Run, reason: unknown): void {
    const at = this.#waiting.indexOf(run);
    if (at >= 0) this.#waiting.splice(at, 1);
    const cause = abortError(reason);
    run.settleRest(
      0,
      ({ topic }) => retryable(`Publish to ${show(topic)} aborted before its PUBACK arrived`, cause),
      ({ topic }) => retryable(`Publish to ${show(topic)} was cancelled before sending`, cause),
    );
  }

  /** A slot came free: a waiting run fills it. */
  #released(): void {
    if (this.#waiting.length > 0) this.#wake();
  }

  /** Fails every pending publish and drops it from the client's outgoing store. */
  #failPending(outcome: (topic: string) => PublishOutcome): void {
    if (this.#pending.size === 0) return;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) {
      p.run.settle(p.index, outcome(p.topic));
      forget(p);
    }
    this.#released();
  }

  // --- closing -----------------------------------------------------------------------------

  async #shutdown(): Promise<void> {
    this.#closed = true;
    this.#wake();
    this.#notifyReady();
    // Unsent messages fail at once; sent ones get their PUBACK or fail within timeoutMs.
    await Promise.allSettled([...this.#runs].map((run) => run.promise));
    this.#sweep.stop();
    const client = this.#client;
    if (client === undefined) return;
    if (this.#owned) await endClient(client, this.#options.timeoutMs);
    else this.#detach(client);
  }

  #detach(client: MqttClient): void {
    const listeners = this.#listeners;
    if (listeners === undefined) return;
    client.off('connect', listeners.connect);
    client.off('close', listeners.close);
    client.off('reconnect', listeners.reconnect);
    client.off('error', listeners.error);
    client.off('disconnect', listeners.disconnect);
    client.off('packetreceive', listeners.packetreceive);
  }
}

/** The connected client, boxed so that `#ready` can also answer with an outcome. */
class MqttPublisherClient {
  constructor(readonly client: MqttClient) {}
}

/** Drops a publish we gave up on from MQTT.js's outgoing store, so it is not resent on reconnect. */
function forget(pending: Pending): void {
  const { client, messageId } = pending;
  if (messageId >= 0 && client.outgoing[messageId] !== undefined) client.removeOutgoingMessage(messageId);
}

/** Ends a client this publisher made: DISCONNECT when connected (bounded by timeoutMs), else at once. */
async function endClient(client: MqttClient, timeoutMs: number): Promise<void> {
  if (client.connected) {
    let timer: NodeJS.Timeout | undefined;
    const ended = new Promise<void>((resolve) => client.end(false, () => resolve()));
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    });
    const clean = await Promise.race([ended.then(() => true), late.then(() => false)]);
    clearTimeout(timer);
    if (clean) return;
    // Still waiting for packets that are not ours: the client is already ending (no reconnect).
    client.stream?.destroy();
    return;
  }
  await new Promise<void>((resolve) => {
    client.end(true, () => resolve());
  });
}
