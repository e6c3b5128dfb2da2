import { afterEach, describe, expect, it, vi } from 'vitest';
import { DEFAULT_CE_SOURCE } from '../../src/envelope/ce-source.js';
import { OutboxValidationError, PublishError } from '../../src/errors.js';
import {
  DEFAULT_MAX_IN_FLIGHT,
  DEFAULT_TIMEOUT_MS,
  resolveWebhookOptions,
  type WebhookPublisherOptions,
} from '../../src/publishers/webhook/options.js';
import { makeMessage } from '../helpers/messages.js';

const SECRET = `whsec_${Buffer.from('a-32-byte-secret-for-the-tests!!').toString('base64')}`;
const valid: WebhookPublisherOptions = { endpoints: 'https://example.com/hooks', secret: SECRET };

function thrown(options: unknown): OutboxValidationError {
  try {
    resolveWebhookOptions(options as WebhookPublisherOptions);
  } catch (error) {
    if (error instanceof OutboxValidationError) return error;
    throw error;
  }
  throw new Error('expected an OutboxValidationError');
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('resolveWebhookOptions', () => {
  it('fills in the defaults and freezes the result', () => {
    const resolved = resolveWebhookOptions(valid);
    expect(resolved).toMatchObject({
      timeoutMs: DEFAULT_TIMEOUT_MS,
      maxInFlight: DEFAULT_MAX_IN_FLIGHT,
      batchSize: undefined,
      headers: {},
      source: DEFAULT_CE_SOURCE,
    });
    expect([DEFAULT_TIMEOUT_MS, DEFAULT_MAX_IN_FLIGHT, DEFAULT_CE_SOURCE]).toEqual([10_000, 64, 'tx-outbox']);
    expect(Object.isFrozen(resolved)).toBe(true);
    expect(Object.isFrozen(resolved.headers)).toBe(true);
    expect(resolved.key.equals(Buffer.from('a-32-byte-secret-for-the-tests!!'))).toBe(true);
  });

  it('keeps what is given', () => {
    const resolved = resolveWebhookOptions({
      ...valid,
      timeoutMs: 1.5,
      maxInFlight: 3,
      batch: { maxSize: 7 },
      headers: { 'x-api-key': 'k' },
      ceSource: 'orders',
    });
    expect(resolved).toMatchObject({
      timeoutMs: 1.5,
      maxInFlight: 3,
      batchSize: 7,
      headers: { 'x-api-key': 'k' },
      source: 'orders',
    });
  });

  it('resolves endpoints per message: a record by topic with the * fallback', () => {
    const { resolve } = resolveWebhookOptions({
      ...valid,
      endpoints: { payments: 'https://a.example/p', '*': 'https://b.example/other' },
    });
    const payments = resolve(makeMessage({ topic: 'payments' }));
    const other = resolve(makeMessage({ topic: null }));
    expect(payments).not.toBeInstanceOf(PublishError);
    expect(other).not.toBeInstanceOf(PublishError);
    if (payments instanceof PublishError || other instanceof PublishError) return;
    expect(payments.url.href).toBe('https://a.example/p');
    expect(other.url.href).toBe('https://b.example/other');
  });

  it.each([
    ['options', null, /^options: is missing/],
    ['timeoutMs', { timeoutMs: 0 }, /omit `timeoutMs` for the default \(10000\)/],
    ['timeoutMs', { timeoutMs: Number.POSITIVE_INFINITY }, /positive number/],
    ['maxInFlight', { maxInFlight: 1.5 }, /omit `maxInFlight` for the default \(64\)/],
    ['maxInFlight', { maxInFlight: 2 ** 60 }, /positive integer/],
    ['batch', { batch: 5 }, /must be an object/],
    ['batch.maxSize', { batch: { maxSize: 0 } }, /Pass an integer >= 1/],
    ['headers', { headers: 'x' }, /must be an object/],
    ['headers.x-n', { headers: { 'x-n': 1 } }, /must be a string, got number/],
    ['ceSource', { ceSource: '' }, /is empty/],
    ['ceSource', { ceSource: 'orders service' }, /" " at index 6.*URI-reference/],
    ['ceSource', { ceSource: 42 }, /is a number/],
  ])('refuses a bad %s, naming it and the fix', (field, override, message) => {
    const error = thrown(override === null ? null : { ...valid, ...override });
    expect(error.field).toBe(field);
    expect(error.message).toMatch(message);
  });
});

describe('the old spelling `concurrency`', () => {
  it('is read as maxInFlight, with one DeprecationWarning, and refused together with it', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const old = { ...valid, concurrency: 5 };
    expect(resolveWebhookOptions(old).maxInFlight).toBe(5);
    expect(resolveWebhookOptions(old).maxInFlight).toBe(5);
    expect(warn).toHaveBeenCalledTimes(1);
    expect(String(warn.mock.calls[0]?.[0])).toContain('`concurrency` is deprecated, use `maxInFlight`');
    expect(warn.mock.calls[0]?.[1]).toMatchObject({ code: 'TXO_DEPRECATED_OPTION' });
    expect(thrown({ ...old, maxInFlight: 5 }).field).toBe('concurrency');
    expect(thrown({ ...valid, concurrency: 0 }).field).toBe('maxInFlight');
    warn.mockRestore();
  });
});

describe('the old spelling `source`', () => {
  it('is read as ceSource, with one DeprecationWarning, named as spelled, and refused together with it', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      expect(resolveWebhookOptions({ ...valid, source: 'urn:a' }).source).toBe('urn:a');
      expect(String(warn.mock.calls[0]?.[0])).toContain('`source` is deprecated, use `ceSource`');
      expect(thrown({ ...valid, source: 'a b' }).field).toBe('source');
      expect(thrown({ ...valid, source: 'urn:a', ceSource: 'urn:b' }).field).toBe('source');
    } finally {
      warn.mockRestore();
    }
  });
});
