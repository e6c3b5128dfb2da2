/** Reading what the Redis publisher wrote: stream entries as bytes, as the contract suite's messages. */
import { CloudEvent } from 'cloudevents';
import { createClient, RESP_TYPES } from 'redis';
import { PAYLOAD_FIELD } from '../../src/publishers/redis/index.js';
import type { ReceivedMessage } from '../../src/testing/index.js';

export const REDIS_URL = process.env['REDIS_URL'] ?? 'redis://127.0.0.1:6379';

export type RedisTestClient = ReturnType<typeof createClient>;

/** A connected client for the test's own reads and writes (errors ignored: the tests stop servers). */
export async function connectRedis(url = REDIS_URL): Promise<RedisTestClient> {
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

export interface Entry {
  readonly id: string;
  readonly fields: Record<string, Buffer>;
}

/** XRANGE of a stream, field values as bytes. */
export async function entries(client: RedisTestClient, stream: string): Promise<Entry[]> {
  const reply = (await client.sendCommand(['XRANGE', stream, '-', '+'], {
    typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer },
  })) as Array<[Buffer, Buffer[]]>;
  return reply.map(([id, flat]) => {
    const fields: Record<string, Buffer> = {};
    for (let i = 0; i < flat.length; i += 2) fields[flat[i]!.toString()] = flat[i + 1]!;
    return { id: id.toString(), fields };
  });
}

/** Every field but the payload, as UTF-8 text: the entry's envelope. */
export function envelopeFields(entry: Entry): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(entry.fields)) {
    if (name !== PAYLOAD_FIELD) headers[name] = value.toString('utf8');
  }
  return headers;
}

/** A CloudEvents attribute name (core specification §3.1.1); Redis fields named otherwise are the message's own headers. */
const ATTRIBUTE_NAME = /^[a-z0-9]{1,20}$/;

/**
 * The entry as a CloudEvents reader knowing only the documented layout reads it (Redis has no
 * binding, so no SDK parser): every field named like an attribute (`traceparent` included,
 * the Distributed Tracing extension) into a strict `new CloudEvent`, which validates them.
 */
export function cloudEventOf(entry: Entry): Record<string, unknown> {
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(envelopeFields(entry))) {
    if (ATTRIBUTE_NAME.test(name)) attributes[name] = value;
  }
  // Spread, not toJSON(): that rewrites `time`, which would hide a time not written as sent.
  const { data: _data, data_base64: _base64, ...event } = { ...new CloudEvent(attributes, true) };
  return event;
}

/** A stream entry as the publisher contract reads it: envelope fields as headers, the payload field, the CloudEvent. */
export function toReceived(entry: Entry): ReceivedMessage {
  const headers = envelopeFields(entry);
  return {
    eventId: headers['id'] ?? '',
    aggregateId: headers['aggregateid'] ?? '',
    sequence: Number(headers['aggregatesequence']),
    headers,
    payload: entry.fields[PAYLOAD_FIELD] ?? Buffer.alloc(0),
    cloudEvent: cloudEventOf(entry),
  };
}

/** Deletes every key matching `pattern`. */
export async function deleteKeys(client: RedisTestClient, pattern: string): Promise<void> {
  for await (const keys of client.scanIterator({ MATCH: pattern, COUNT: 1000 })) {
    if (keys.length > 0) await client.del(keys);
  }
}
