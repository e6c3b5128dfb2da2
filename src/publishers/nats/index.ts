/** `tx-outbox/nats`: the NATS JetStream publisher, and the stream it lands in. */
export type { NatsPublisherOptions, NatsPublishMode } from './options.js';
export { natsPublisher } from './publisher.js';
export { type EnsureStreamOptions, ensureStream } from './stream.js';
export { defaultSubject, subjectProblem } from './wire.js';
