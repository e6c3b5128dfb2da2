/** Connection settings for the real services the tests use (local defaults). */
export const DATABASE_URL = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';
export const NATS_URL = process.env['NATS_URL'] ?? 'nats://127.0.0.1:4222';
