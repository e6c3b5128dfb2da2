/**
 * What a message becomes on the wire: its exchange, routing key, content and AMQP properties,
 * and the size rules AMQP and amqplib set (short strings, the header table, the frame).
 *
 * Every message is persistent (delivery mode 2) and `mandatory`, with the event id as its AMQP
 * `message-id`, the event type as `type`, the creation time as `timestamp` (unix seconds) and
 * the CloudEvents envelope in binary content mode as the AMQP binding says: `datacontenttype` is
 * the `content-type` property (§3.1.1), every other attribute a `cloudEvents_<name>` header
 * (§3.1.3.1: the `_` separator is preferred, JMS selectors cannot name `:`) holding its value as
 * an AMQP string, as it is (§3.1.3.2), after the user headers and `traceparent`. The payload
 * bytes are sent untouched.
 *
 * Header values are AMQP 0-9-1 long strings (UTF-8). RabbitMQ hands a header to AMQP 1.0
 * consumers as a string only when it is under 256 bytes without a NUL, else as binary: every
 * attribute stays under that (type, aggregate type and id are at most 255 bytes without control
 * characters from `enqueue`, the source at most {@link AMQP10_STRING_MAX} from the options, the
 * rest is short); a user header value may not (up to 8 KiB at `enqueue`).
 */
import type { Options } from 'amqplib';
import { envelopeHeaders } from '../../envelope/bindings.js';
import { errorMessage } from '../../errors.js';
import type { OutboxMessage, PublishOutcome } from '../contract.js';
import { asBuffer } from '../core/bytes.js';
import { defaultDestination } from '../core/destination.js';
import { permanent } from '../core/outcomes.js';
import { type Addressed, tooLarge } from './classify.js';

/** AMQP short strings (exchange, routing key, message id) are at most 255 bytes. */
export const SHORTSTR_MAX = 255;
/**
 * Longest header value RabbitMQ converts to an AMQP 1.0 string for AMQP 1.0 consumers (it
 * makes a longer one binary, which a CloudEvents String attribute must not be).
 */
export const AMQP10_STRING_MAX = 255;
/** amqplib encodes a message's properties (headers included) into a 64 KiB buffer. */
export const PROPERTIES_BUFFER = 65_536;

/** `message.topic`, else `${aggregateType}.${type}`: the same function as `defaultDestination` of `tx-outbox`. */
export const defaultRoutingKey: (message: OutboxMessage) => string = defaultDestination;

/** A message ready to publish. */
export interface Item extends Addressed {
  readonly content: Buffer;
  readonly options: Options.Publish;
  /** Rough encoded size of the properties (headers included), for the frame-size check. */
  readonly propertiesBytes: number;
}

/** What {@link prepare} needs to know. */
export interface WireOptions {
  readonly exchange: string | ((message: OutboxMessage) => string);
  readonly destination: (message: OutboxMessage) => string;
  readonly source: string;
  /** The current limit (`maxMessageBytes`, or the broker's once learned). */
  readonly maxMessageBytes: number;
}

/** Exchange, routing key, content and properties; a message RabbitMQ cannot carry gets its outcome here. */
export function prepare(message: OutboxMessage, wire: WireOptions): Item | PublishOutcome {
  const { eventId, payload } = message;
  let exchange: string;
  let routingKey: string;
  try {
    exchange = typeof wire.exchange === 'string' ? wire.exchange : wire.exchange(message);
    routingKey = wire.destination(message);
  } catch (error) {
    return permanent(
      `The exchange or routingKey function threw for event ${eventId}: ${errorMessage(error)}`,
      error,
    );
  }
  if (typeof exchange !== 'string' || typeof routingKey !== 'string') {
    return permanent(`The exchange and routingKey functions must return strings (event ${eventId})`);
  }
  if (Buffer.byteLength(exchange) > SHORTSTR_MAX || Buffer.byteLength(routingKey) > SHORTSTR_MAX) {
    return permanent(
      `Exchange "${exchange.slice(0, 64)}" or routing key "${routingKey.slice(0, 64)}" of event ${eventId} ` +
        `is longer than AMQP's ${SHORTSTR_MAX} bytes`,
    );
  }
  if (payload.byteLength > wire.maxMessageBytes) {
    return tooLarge(eventId, payload.byteLength, wire.maxMessageBytes);
  }
  const headers = envelopeHeaders(message, wire.source, 'amqp');
  const tableBytes = headerTableBytes(headers);
  if (tableBytes > PROPERTIES_BUFFER) {
    return permanent(
      `The headers of event ${eventId} take ${tableBytes} bytes encoded: more than the ` +
        `${PROPERTIES_BUFFER} bytes an AMQP header table can carry (amqplib)`,
    );
  }
  const propertiesBytes =
    tableBytes + 64 + eventId.length + Buffer.byteLength(message.type) + message.contentType.length;
  return {
    eventId,
    exchange,
    routingKey,
    content: asBuffer(payload),
    options: {
      persistent: true,
      mandatory: true,
      messageId: eventId,
      contentType: message.contentType,
      type: message.type,
      timestamp: Math.floor(message.createdAt.getTime() / 1000),
      headers,
    },
    propertiesBytes,
  };
}

/** Encoded size of string headers as an AMQP field table: name length, name, type tag, value length, value. */
export function headerTableBytes(headers: Readonly<Record<string, string>>): number {
  let bytes = 0;
  for (const name in headers) bytes += 6 + Buffer.byteLength(name) + Buffer.byteLength(headers[name]!);
  return bytes;
}

/**
 * The refusal of a message whose properties do not fit one frame of the broker's `frame_max`
 * (checked only below amqplib's own 64 KiB properties buffer), else undefined.
 */
export function overFrame(item: Item, frameMax: number): PublishOutcome | undefined {
  if (frameMax >= PROPERTIES_BUFFER || item.propertiesBytes <= frameMax - 8) return undefined;
  return permanent(
    `The headers of event ${item.eventId} take about ${item.propertiesBytes} bytes: more than ` +
      `the broker's frame_max of ${frameMax} bytes`,
  );
}

/** The broker's `frame_max` of a channel's connection, or AMQP's usual 128 KiB when unknown. */
export function frameMaxOf(connection: unknown): number {
  const frameMax = (connection as { frameMax?: unknown } | undefined)?.frameMax;
  return typeof frameMax === 'number' && frameMax > 0 ? frameMax : 131_072;
}
