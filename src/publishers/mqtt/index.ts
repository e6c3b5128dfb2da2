/**
 * MQTT publisher on MQTT.js 5.x (optional peer dependency `mqtt`), `tx-outbox/mqtt`. Every
 * message is a QoS 1 (or 2) PUBLISH whose outcome waits for the broker's PUBACK (PUBCOMP); many
 * are in flight at once on one connection, sent in batch order, so messages of one topic keep
 * their order.
 *
 * MQTT 5 (default): the CloudEvents envelope travels as user properties, the payload bytes are
 * sent untouched with the message's `contentType` (and the UTF-8 payload format indicator for
 * JSON). MQTT 3.1.1 has no properties: with `protocolVersion: 4` every message is a CloudEvents
 * structured-mode JSON document instead (the only mode the CloudEvents MQTT 3.1.1 binding has).
 * A broker that refuses MQTT 5 is never silently answered with a different wire format.
 *
 * The folder: options.ts (options, resolution), topic.ts (topic and string rules), wire.ts
 * (message → PUBLISH, v5 vs v3.1.1, packet sizes), classify.ts (reason codes → outcomes),
 * session.ts (the connection), window.ts (in flight, deadlines), publisher.ts (the class).
 */
export type { MqttPublisherOptions } from './options.js';
export { mqttPublisher } from './publisher.js';
export { defaultTopic, topicProblem } from './topic.js';
