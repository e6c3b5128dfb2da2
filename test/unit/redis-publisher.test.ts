import { ErrorReply } from 'redis';
import { describe, expect, it, vi } from 'vitest';
import { envelopeHeaders } from '../../src/envelope/bindings.js';
import { BROKER_UNAVAILABLE, OutboxValidationError } from '../../src/errors.js';
import type { PublishOutcome } from '../../src/publishers/contract.js';
import {
  abortedBeforeReply,
  batchAborted,
  commandVerdict,
  isErrorReply,
  isNoScript,
  noReplyInTime,
  notAvailable,
  replyCode,
} from '../../src/publishers/redis/classify.js';
import { resolveRedisOptions } from '../../src/publishers/redis/options.js';
import {
  APPEND_SHA,
  appendCommand,
  appendRule,
  type Command,
  PAYLOAD_FIELD,
} from '../../src/publishers/redis/wire.js';
import { makeMessage } from '../helpers/messages.js';

const URL = 'redis://127.0.0.1:6379';

function command(outcome: Command | PublishOutcome): Command {
  if (!('args' in outcome)) throw new Error(`expected a command, got ${JSON.stringify(outcome)}`);
  return outcome;
}

function failure(outcome: Command | PublishOutcome): { message: string; retryable: boolean } {
  if ('args' in outcome || outcome.ok) throw new Error('expected a failed outcome');
  return { message: outcome.error.message, retryable: outcome.retryable };
}

describe('resolveRedisOptions', () => {
  it('applies the defaults into a frozen object', () => {
    const resolved = resolveRedisOptions({ url: URL });
    expect(Object.isFrozen(resolved)).toBe(true);
    expect(resolved.url).toBe(URL);
    expect(resolved.client).toBeUndefined();
    expect(resolved.timeoutMs).toBe(10_000);
    expect(resolved.append).toEqual({
      window: '86400000',
      guardPrefix: 'tx-outbox:dedup:',
      trimCount: '',
      trimMode: '~',
      source: 'tx-outbox',
    });
    const message = makeMessage({ topic: null, aggregateType: 'order', type: 'created' });
    expect(resolved.destination(message)).toBe('order.created');
    expect(resolved.destination(makeMessage({ topic: 'explicit' }))).toBe('explicit');
  });

  it('names the option and the fix in every refusal', () => {
    const client = { isOpen: false, isReady: false, sendCommand: vi.fn(), on: vi.fn(), off: vi.fn() };
    const cases: Array<[Parameters<typeof resolveRedisOptions>[0], RegExp]> = [
      [{}, /^url: is missing\. Give `url` \(redis:\/\/host:port\) or a `client`$/],
      [{ url: '' }, /^url: is missing/],
      [{ url: URL, client }, /^client: was given together with `url`\. Give only one of them$/],
      [{ client, clientOptions: {} }, /^clientOptions: only apply to a client made from `url`/],
      [{ url: URL, timeoutMs: 0 }, /^timeoutMs: must be a positive integer, got 0/],
      [{ url: URL, dedupWindowMs: -1 }, /^dedupWindowMs: must be a whole number of milliseconds >= 0/],
      [{ url: URL, dedupWindowMs: 1.5 }, /^dedupWindowMs: /],
      [{ url: URL, maxLen: { count: 0 } }, /^maxLen\.count: must be a positive integer, got 0/],
      [{ url: URL, keyPrefix: '' }, /^keyPrefix: is empty\. Omit it for the default `tx-outbox`$/],
    ];
    for (const [options, message] of cases) {
      expect(() => resolveRedisOptions(options)).toThrow(OutboxValidationError);
      expect(() => resolveRedisOptions(options)).toThrow(message);
    }
    expect(() => resolveRedisOptions({ url: URL, ceSource: 'orders service' })).toThrow(
      /^ceSource: has " " at index 6, which a URI cannot hold unencoded/,
    );
    expect(() => resolveRedisOptions({ url: URL, ceSource: '' })).toThrow(/^ceSource: is empty/);
    expect(resolveRedisOptions({ url: URL, ceSource: 'urn:example:orders' }).append.source).toBe(
      'urn:example:orders',
    );
    expect(resolveRedisOptions({ client }).url).toBeUndefined();
    expect(resolveRedisOptions({ url: URL, dedupWindowMs: 0 }).append.window).toBeUndefined();
  });

  it('reads the deprecated `dedupWindowSeconds` as `dedupWindowMs` (× 1000) and `source` as `ceSource`', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const old = resolveRedisOptions({ url: URL, dedupWindowSeconds: 60, source: 'urn:example:orders' });
      expect(old.append).toMatchObject({ window: '60000', source: 'urn:example:orders' });
      expect(resolveRedisOptions({ url: URL, dedupWindowSeconds: 0 }).append.window).toBeUndefined();
      expect(resolveRedisOptions({ url: URL, dedupWindowMs: 60_000 }).append.window).toBe('60000');
      expect(warn.mock.calls.map(([text]) => String(text).split(' (the old')[0])).toEqual([
        'redisPublisher: option `dedupWindowSeconds` is deprecated, use `dedupWindowMs` (in milliseconds: the seconds × 1000)',
        'redisPublisher: option `source` is deprecated, use `ceSource`',
      ]);
      expect(() => resolveRedisOptions({ url: URL, dedupWindowSeconds: 1, dedupWindowMs: 1000 })).toThrow(
        /^dedupWindowSeconds: is the deprecated spelling of `dedupWindowMs`, which is given too/,
      );
      expect(() => resolveRedisOptions({ url: URL, source: 'orders service' })).toThrow(/^source: has " "/);
      expect(() => resolveRedisOptions({ url: URL, dedupWindowSeconds: -1 })).toThrow(/^dedupWindowMs: /);
    } finally {
      warn.mockRestore();
    }
  });

  it('reads the deprecated `stream` as `destination`, warning once, and refuses both', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const route = (): string => 'routed';
      expect(resolveRedisOptions({ url: URL, stream: route }).destination).toBe(route);
      resolveRedisOptions({ url: URL, stream: route });
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0]![0])).toMatch(
        /redisPublisher: option `stream` is deprecated, use `destination`/,
      );
      expect(() => resolveRedisOptions({ url: URL, stream: route, destination: route })).toThrow(
        /^stream: is the deprecated spelling of `destination`/,
      );
    } finally {
      warn.mockRestore();
    }
  });
});

describe('appendCommand', () => {
  const route = (m: { topic: string | null }): string => m.topic ?? '';

  it('with the guard: EVALSHA of the script, stream and guard keys, window, trim, then the fields', () => {
    const rule = appendRule({ keyPrefix: 'p', maxLen: { count: 5, approximate: false }, ceSource: 'src' });
    const message = makeMessage({
      topic: 's1',
      headers: { traceparent: 't', [PAYLOAD_FIELD]: 'dropped' },
      payload: new Uint8Array([9, 8, 7]).subarray(1),
    });
    const { args, stream, eventId, index } = command(appendCommand(message, 3, route, rule));
    expect({ stream, eventId, index }).toEqual({ stream: 's1', eventId: message.eventId, index: 3 });
    expect(args.slice(0, 8)).toEqual([
      'EVALSHA',
      APPEND_SHA,
      '2',
      's1',
      `p:dedup:${message.eventId}`,
      '86400000',
      '5',
      '=',
    ]);
    const fields = args.slice(8);
    expect(fields.slice(0, 2)).toEqual(['traceparent', 't']);
    expect(fields[fields.indexOf('id') + 1]).toBe(message.eventId);
    expect(fields[fields.indexOf('source') + 1]).toBe('src');
    expect(fields.filter((f) => f === PAYLOAD_FIELD)).toHaveLength(1);
    expect(fields.at(-2)).toBe(PAYLOAD_FIELD);
    expect(Buffer.isBuffer(fields.at(-1))).toBe(true);
    expect([...(fields.at(-1) as Buffer)]).toEqual([8, 7]);
  });

  it('without the guard: a plain XADD, with MAXLEN ~ when capped', () => {
    const message = makeMessage({ topic: 's2' });
    const plain = command(appendCommand(message, 0, route, appendRule({ dedupWindowMs: 0 })));
    expect(plain.args.slice(0, 4)).toEqual(['XADD', 's2', '*', 'specversion']);
    const capped = appendRule({ dedupWindowMs: 0, maxLen: { count: 100 } });
    expect(command(appendCommand(message, 0, route, capped)).args.slice(0, 7)).toEqual([
      'XADD',
      's2',
      'MAXLEN',
      '~',
      '100',
      '*',
      'specversion',
    ]);
  });

  it('writes the fields of the MQTT 5 layout: own headers, unprefixed attributes raw, payload last', () => {
    const message = makeMessage({
      topic: 's3',
      aggregateId: ' 50% café "x" ',
      sequence: 42,
      schemaVersion: 3,
      contentType: 'application/octet-stream',
      headers: { traceparent: 't', 'x-note': 'a %41 b' },
      createdAt: new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 6)),
    });
    const rule = appendRule({ dedupWindowMs: 0, ceSource: 'urn:orders' });
    const fields = command(appendCommand(message, 0, route, rule)).args.slice(3);
    expect(fields.slice(0, -2)).toEqual(
      Object.entries(envelopeHeaders(message, 'urn:orders', 'redis')).flat(),
    );
    expect(fields.slice(0, -2)).toEqual([
      ...['traceparent', 't', 'x-note', 'a %41 b'],
      ...['specversion', '1.0', 'id', message.eventId, 'source', 'urn:orders'],
      ...['type', 'order.created', 'time', '2026-01-02T03:04:05.006Z', 'subject', ' 50% café "x" '],
      ...['datacontenttype', 'application/octet-stream', 'aggregatetype', 'order'],
      ...['aggregateid', ' 50% café "x" ', 'sequence', '0000000000000000042', 'aggregatesequence', '42'],
      ...['schemaversion', '3'],
    ]);
    expect(fields.at(-2)).toBe(PAYLOAD_FIELD);
  });

  it('drops own headers readers would take for an attribute or the payload (rows of earlier versions)', () => {
    const message = makeMessage({
      topic: 's4',
      sequence: 7,
      // 0.1 accepted `aggregatesequence` as a header name; the others only an unchecked row holds.
      headers: { AggregateSequence: 'x', Payload: 'y', dataschema: 'z', type: 'mine', 'x-ok': 'kept' },
    });
    const fields = command(appendCommand(message, 0, route, appendRule({ dedupWindowMs: 0 }))).args.slice(3);
    const names = fields.filter((_, i) => i % 2 === 0);
    expect(names).not.toContain('AggregateSequence');
    expect(names).not.toContain('Payload');
    expect(names).not.toContain('dataschema');
    expect(names.filter((n) => n === 'type')).toHaveLength(1);
    expect(fields[fields.indexOf('type') + 1]).toBe(message.type);
    expect(fields[fields.indexOf('aggregatesequence') + 1]).toBe('7');
    expect(fields[fields.indexOf('x-ok') + 1]).toBe('kept');
    expect(names.filter((n) => n === PAYLOAD_FIELD)).toHaveLength(1);
  });

  it('a destination that throws or gives no key fails the message permanently', () => {
    const rule = appendRule({});
    const message = makeMessage();
    const threw = failure(
      appendCommand(
        message,
        0,
        () => {
          throw new Error('no route');
        },
        rule,
      ),
    );
    expect(threw).toEqual({
      message: `The stream function threw for event ${message.eventId}: no route`,
      retryable: false,
    });
    const empty = failure(appendCommand(message, 0, () => '', rule));
    expect(empty).toEqual({
      message: `Invalid stream key "" for event ${message.eventId}: it must be a non-empty string`,
      retryable: false,
    });
  });
});

describe('Redis classification', () => {
  const what = 'event e1 on stream "s"';

  it('reads the reply code, also of a script error wrapped by Redis 6', () => {
    expect(replyCode('WRONGTYPE Operation against a key')).toBe('WRONGTYPE');
    expect(replyCode('NOSCRIPT')).toBe('NOSCRIPT');
    expect(
      replyCode('ERR Error running script (call to f_abc): @user_script:5: -OOM command not allowed '),
    ).toBe('OOM');
    expect(replyCode('ERR Error running script (call to f_abc): nothing to find')).toBe('ERR');
  });

  it('tells error replies (also by class name) from client errors', () => {
    expect(isErrorReply(new ErrorReply('ERR x'))).toBe(true);
    class SimpleError extends Error {}
    expect(isErrorReply(new SimpleError('ERR x'))).toBe(true);
    expect(isErrorReply(new Error('ERR x'))).toBe(false);
    expect(isNoScript(new ErrorReply('NOSCRIPT No matching script'))).toBe(true);
    expect(isNoScript(new Error('NOSCRIPT No matching script'))).toBe(false);
  });

  it('gives each reply its verdict', () => {
    const lost = commandVerdict(new Error('Socket closed unexpectedly'), what, 'redis://h');
    expect(lost).toMatchObject({ retryable: true, code: BROKER_UNAVAILABLE });
    expect(lost.message).toBe(`Redis is not available (redis://h) for ${what}: Socket closed unexpectedly`);
    for (const reply of ['LOADING x', 'READONLY x', 'OOM command not allowed', 'MISCONF x', 'BUSY x']) {
      const verdict = commandVerdict(new ErrorReply(reply), what, 'h');
      expect(verdict).toMatchObject({ retryable: true, code: BROKER_UNAVAILABLE });
      expect(verdict.message).toBe(`Redis cannot take writes now (${what}): ${reply}`);
    }
    const noScript = commandVerdict(new ErrorReply('NOSCRIPT x'), what, 'h');
    expect(noScript.retryable).toBe(true);
    expect(noScript.code).not.toBe(BROKER_UNAVAILABLE);
    expect(noScript.message).toBe(`Redis refused ${what} for now: NOSCRIPT x`);
    const wrongType = commandVerdict(new ErrorReply('WRONGTYPE Operation'), what, 'h');
    expect(wrongType.retryable).toBe(false);
    expect(wrongType.message).toBe(`Redis refused ${what}: WRONGTYPE Operation`);
  });

  it('words the timeout, the abort and the unavailable client as before', () => {
    const late = noReplyInTime(what, 'redis://h', 500, new Error('timed out after 500 ms'));
    expect(late).toMatchObject({ retryable: true, code: BROKER_UNAVAILABLE });
    expect(late.message).toBe(
      `No reply from Redis (redis://h) within 500 ms for ${what}; it may have been stored (a republish is deduplicated)`,
    );
    const aborted = abortedBeforeReply(what, new Error('relay stopping'));
    expect(aborted.message).toBe(`Publish of ${what} aborted before Redis replied: relay stopping`);
    expect(aborted.retryable).toBe(true);
    expect(aborted.code).not.toBe(BROKER_UNAVAILABLE);
    expect((aborted.cause as Error).name).toBe('AbortError');
    expect(batchAborted('shutdown').message).toBe('Redis publish aborted: shutdown');
    const down = notAvailable('redis://h', new Error('connect ECONNREFUSED'), new Error('boom'));
    expect(down).toMatchObject({ retryable: true, code: BROKER_UNAVAILABLE });
    expect(down.message).toBe(
      'Redis is not available (redis://h): connect ECONNREFUSED (last client error: boom)',
    );
    expect(notAvailable('h', new Error('x'), undefined).message).toBe('Redis is not available (h): x');
  });
});
