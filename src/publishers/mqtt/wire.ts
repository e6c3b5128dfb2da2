/**
 * An outbox message as an MQTT PUBLISH, as the CloudEvents MQTT binding says. MQTT 5 (binary
 * content mode, §3.1): the message's own headers, then every attribute under its own name
 * (`id`, `source` …, §3.1.3.1) as user properties, values as they are (§3.1.3.2); the
 * payload bytes untouched (§3.1.2) with the PUBLISH Content Type = `datacontenttype` (§3.1.1)
 * and, for JSON, the UTF-8 payload format indicator. `datacontenttype` is a user property too,
 * as in the binding's own example (§3.1.4): the `cloudevents` SDK reads it only from there.
 * MQTT 3.1.1 has no properties: the message is a structured-mode JSON document (§3.2). A
 * message MQTT cannot carry gets its permanent outcome here, before anything is sent; so does
 * one over the broker's Maximum Packet Size.
 */
import type { IClientPublishOptions, MqttClient } from 'mqtt';
import { envelopeHeaders, structuredAttributes } from '../../envelope/bindings.js';
import { errorMessage } from '../../errors.js';
import type { OutboxMessage, PublishOutcome } from '../contract.js';
import { asBuffer } from '../core/bytes.js';
import { permanent } from '../core/outcomes.js';
import { MAX_PACKET_IDS, type MqttResolved } from './options.js';
import { show, stringProblem, topicProblem } from './topic.js';

/** A message that passed every check that can be made before connecting. */
export interface Prepared {
  readonly topic: string;
  readonly payload: Buffer;
  readonly options: IClientPublishOptions;
  /** An upper bound of the PUBLISH packet's size; the exact size is computed only when it matters. */
  readonly maxBytes: number;
}

/** What {@link prepareMessage} reads of the resolved options. */
export type WireOptions = Pick<MqttResolved, 'destination' | 'qos' | 'protocolVersion' | 'source'>;

/** The largest remaining length an MQTT packet can declare (4-byte variable byte integer). */
const MAX_REMAINING_LENGTH = 268_435_455;

export function isPrepared(item: Prepared | PublishOutcome): item is Prepared {
  return 'topic' in item;
}

/** Topic, properties and payload of `message`, or its permanent failure (anything thrown included, e.g. an invalid `createdAt`). */
export function prepareMessage(message: OutboxMessage, options: WireOptions): Prepared | PublishOutcome {
  try {
    return prepare(message, options);
  } catch (error) {
    return permanent(`Event ${message.eventId} cannot be published: ${errorMessage(error)}`, error);
  }
}

function prepare(message: OutboxMessage, options: WireOptions): Prepared | PublishOutcome {
  let topic: string;
  try {
    topic = options.destination(message);
  } catch (error) {
    return permanent(`The topic function threw for event ${message.eventId}: ${errorMessage(error)}`, error);
  }
  if (typeof topic !== 'string') {
    return permanent(`The topic function returned a ${typeof topic} for event ${message.eventId}`);
  }
  const problem = topicProblem(topic);
  if (problem !== undefined) {
    return permanent(`MQTT topic ${show(topic)} of event ${message.eventId} is invalid: it ${problem}`);
  }
  const { qos, source } = options;
  if (options.protocolVersion === 4) {
    const payload = structuredPayload(message, source);
    if (typeof payload === 'string') {
      return permanent(`Event ${message.eventId} cannot be published over MQTT 3.1.1: ${payload}`);
    }
    return { topic, payload, options: { qos }, maxBytes: 9 + topic.length * 3 + payload.length };
  }
  const userProperties = envelopeHeaders(message, source, 'mqtt');
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

/**
 * MQTT 3.1.1: the CloudEvents structured-mode JSON document carrying the envelope and the payload
 * (`data` = the JSON payload text, embedded untouched; `data_base64` = bytes), or why not. Headers
 * that cannot be attributes travel in the `txoheaders` extension (structuredAttributes).
 */
export function structuredPayload(message: OutboxMessage, source: string): Buffer | string {
  const event = structuredAttributes(message, source);
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

/** Bytes a variable byte integer takes. */
function varIntBytes(value: number): number {
  return value < 128 ? 1 : value < 16_384 ? 2 : value < 2_097_152 ? 3 : 4;
}

/** The exact size of the PUBLISH packet MQTT.js will write for `item` (no topic alias). */
export function packetBytes(item: Prepared): number {
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

/** What the publisher reads of a connected client's CONNACK. */
export type ConnackLimits = Pick<MqttClient, 'options' | 'serverProperties'>;

/** The largest PUBLISH `client`'s broker accepts, in bytes: its Maximum Packet Size (MQTT 5), else MQTT's own limit. */
export function maxPacketBytes(client: ConnackLimits): number {
  const brokerMax =
    client.options.protocolVersion === 5 ? client.serverProperties?.maximumPacketSize : undefined;
  return Math.min(1 + 4 + MAX_REMAINING_LENGTH, brokerMax ?? Number.POSITIVE_INFINITY);
}

/** Publishes that may await their PUBACK on `client`: `maxInFlight`, lowered to its broker's Receive Maximum (MQTT 5). */
export function inFlightCapacity(maxInFlight: number, client: ConnackLimits): number {
  const receiveMaximum =
    client.options.protocolVersion === 5 ? client.serverProperties?.receiveMaximum : undefined;
  return Math.min(maxInFlight, receiveMaximum ?? MAX_PACKET_IDS);
}
