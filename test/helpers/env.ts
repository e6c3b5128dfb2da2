/** Connection settings for the real services the tests use (local defaults). */
export const DATABASE_URL = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
export const NATS_URL = process.env['NATS_URL'] ?? 'nats://127.0.0.1:4222';
/**
 * How many events the publisher contract's relay case moves (`publisherContract`'s default,
 * 10,000, unless set). scripts/test-other-node.sh sets 2,000 for Node 22 and 24: the case still
 * runs the full relay through every publisher there, and its 10,000 run on Node 20 in npm test.
 */
export const CONTRACT_RELAY_EVENTS = Number(process.env['TXO_CONTRACT_RELAY_EVENTS'] ?? 10_000);
