/** The Kafka publisher's error verdicts, with no broker: whole-call failures and per-partition answers. */
import { describe, expect, it } from 'vitest';
import { BROKER_UNAVAILABLE, isBrokerUnavailable, PublishError } from '../../src/errors.js';
import {
  classify,
  deepestMessage,
  gaveUp,
  isUnknownTopic,
  protocolCodes,
  unexpected,
} from '../../src/publishers/kafka/classify.js';
import { partitionError, partitionVerdicts, settleFailedSend } from '../../src/publishers/kafka/verdicts.js';
import type { Item } from '../../src/publishers/kafka/wire.js';

function kafkaError(message: string, fields: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(message), fields);
}

/** Like the client's MultipleErrors: `errors` holds the attempts. */
function multiple(message: string, errors: unknown[], fields: Record<string, unknown> = {}): Error {
  return Object.assign(new Error(message), { errors }, fields);
}

function item(index: number, topic: string, partition: number): Item {
  return {
    index,
    topic,
    key: Buffer.from(`k${index}`),
    value: Buffer.alloc(0),
    headers: new Map(),
    bytes: 50,
    partition,
  };
}

/** A produce response naming each partition's error code (0 = stored). */
function response(topic: string, codes: Record<number, number>): unknown {
  return {
    responses: [
      {
        name: topic,
        partitionResponses: Object.entries(codes).map(([p, errorCode]) => ({ index: Number(p), errorCode })),
      },
    ],
  };
}

describe('classify (a whole call failed)', () => {
  it('unreachable brokers are BROKER_UNAVAILABLE: client network codes, socket codes on the cause chain, client messages', () => {
    for (const error of [
      kafkaError('Network error', { code: 'PLT_KFK_NETWORK' }),
      kafkaError('Timeout', { code: 'PLT_KFK_TIMEOUT' }),
      multiple('Produce failed', [
        kafkaError('connect', { cause: kafkaError('refused', { code: 'ECONNREFUSED' }) }),
      ]),
      kafkaError('x', { cause: kafkaError('dns', { code: 'EAI_AGAIN' }) }),
      kafkaError('Cannot connect to any broker.'),
      kafkaError('Client is closed.'),
      kafkaError('Connection pool is closed.'),
    ]) {
      const verdict = classify(error, 'the batch');
      expect(verdict.retryable).toBe(true);
      expect(verdict.code).toBe(BROKER_UNAVAILABLE);
      expect(verdict.message).toMatch(/^Kafka is not available \(the batch\): /);
      expect(verdict.cause).toBe(error);
    }
  });

  it('a permanent code that is not partition-specific fails permanently; one at partition level does not', () => {
    const denied = classify(kafkaError('denied', { apiCode: 29 }), 'topic "t"');
    expect(denied.retryable).toBe(false);
    expect(denied.message).toBe(
      'Kafka refused topic "t": not authorized to write to the topic (TOPIC_AUTHORIZATION_FAILED)',
    );
    const nested = classify(multiple('failed', [kafkaError('too big', { apiCode: 10 })]), 'the batch');
    expect(nested.retryable).toBe(false);
    expect(nested.message).toMatch(/MESSAGE_TOO_LARGE/);
    const atPartition = classify(
      kafkaError('too big', { apiCode: 10, path: '/responses/0/partitionResponses/0' }),
      'x',
    );
    expect(atPartition.retryable).toBe(true);
    expect(isBrokerUnavailable(atPartition)).toBe(false);
  });

  it('authentication failures are BROKER_UNAVAILABLE (configuration, not the events)', () => {
    const verdict = classify(kafkaError('SASL failed', { code: 'PLT_KFK_AUTHENTICATION' }), 'the batch');
    expect(verdict).toMatchObject({ retryable: true, code: BROKER_UNAVAILABLE });
    expect(verdict.message).toBe('Kafka authentication failed: SASL failed');
  });

  it('anything else is retryable and charged as an attempt', () => {
    const verdict = classify(kafkaError('NOT_LEADER_OR_FOLLOWER', { apiCode: 6 }), 'the batch');
    expect(verdict.retryable).toBe(true);
    expect(verdict.code).not.toBe(BROKER_UNAVAILABLE);
    expect(verdict.message).toBe('Kafka publish of the batch failed: NOT_LEADER_OR_FOLLOWER');
    // A socket code not on the unreachable list is not an outage.
    expect(isBrokerUnavailable(classify(kafkaError('x', { code: 'EACCES' }), 'x'))).toBe(false);
  });

  it('the deepest message comes with the top one', () => {
    expect(deepestMessage(multiple('Produce failed', [kafkaError('first'), kafkaError('last')]))).toBe(
      'Produce failed (last)',
    );
    expect(deepestMessage(kafkaError('alone'))).toBe('alone');
  });

  it('finds unknown topics and protocol codes anywhere in the tree', () => {
    expect(isUnknownTopic(kafkaError('Unknown topic orders.'))).toBe(true);
    expect(isUnknownTopic(multiple('x', [kafkaError('y', { apiCode: 3 })]))).toBe(true);
    expect(isUnknownTopic(kafkaError('Unknown error'))).toBe(false);
    expect(protocolCodes(multiple('x', [kafkaError('a', { apiCode: 36 })], { apiCode: 7 }))).toEqual([7, 36]);
  });

  it('gave up: no answer within timeoutMs is BROKER_UNAVAILABLE; an abort keeps its reason', () => {
    const timeout = gaveUp('timeout', new Error('Timed out'), 1_000);
    expect(timeout.message).toBe(
      'Kafka did not acknowledge within 1000 ms: no answer, the connection is in doubt',
    );
    expect(timeout).toMatchObject({ retryable: true, code: BROKER_UNAVAILABLE });
    const reason = new Error('relay stopping');
    const aborted = gaveUp('caller', reason, 1_000);
    expect(aborted.message).toBe('Publish aborted before Kafka acknowledged: relay stopping');
    expect(aborted.retryable).toBe(true);
    expect(aborted.code).not.toBe(BROKER_UNAVAILABLE);
    expect(aborted.cause).toBe(reason);
    expect(unexpected(new Error('boom'))).toMatchObject({
      message: 'Kafka publish failed: boom',
      retryable: true,
    });
  });
});

describe('per-partition verdicts', () => {
  it('reads every attempt: acknowledged partitions, the last failure code of the others', () => {
    const error = multiple('Produce failed', [
      kafkaError('attempt 1', { response: response('t', { 0: 6, 1: 0, 2: 6 }) }),
      kafkaError('attempt 2', { response: response('t', { 0: 0, 2: 10 }) }),
      { produced: { offsets: [{ topic: 'u', partition: 4 }] } },
    ]);
    const verdicts = partitionVerdicts(error);
    expect([...verdicts.delivered].sort()).toEqual(['t:0', 't:1', 'u:4']);
    expect([...verdicts.failed]).toEqual([['t:2', 10]]);
  });

  it('a partition refusal: permanent for codes a retry cannot cure, else retryable', () => {
    expect(partitionError(10, 't', 2, undefined)).toMatchObject({
      retryable: false,
      message:
        "Kafka refused the message for t[2]: the message is larger than the topic's max.message.bytes (MESSAGE_TOO_LARGE)",
    });
    expect(partitionError(6, 't', 0, undefined)).toMatchObject({
      retryable: true,
      message: 'Kafka could not store the message for t[0] yet (error 6)',
    });
  });

  it('settles a failed send: delivered, refused, halved when too large together, the rest by the general verdict', () => {
    const items = [
      item(0, 't', 0),
      item(1, 't', 1),
      item(2, 't', 1),
      item(3, 't', 1),
      item(4, 't', 2),
      item(5, 't', 3),
      item(6, 't', 4),
    ];
    const error = kafkaError('failed', { response: response('t', { 0: 0, 1: 10, 2: 10, 3: 6 }) });
    const general = new PublishError('general', { retryable: true });
    const settled = settleFailedSend(items, error, general);
    expect(settled.outcomes.get(0)).toEqual({ ok: true });
    // Three records of t[1] too large together: two halves to send again, in order.
    expect(settled.again.map((half) => half.map((i) => i.index))).toEqual([[1, 2], [3]]);
    expect([1, 2, 3].some((i) => settled.outcomes.has(i))).toBe(false);
    // A single record too large: permanent.
    expect(settled.outcomes.get(4)).toMatchObject({ ok: false, retryable: false });
    expect(settled.outcomes.get(5)).toMatchObject({ ok: false, retryable: true });
    // t[4]: the response says nothing of it: the general verdict.
    expect(settled.outcomes.get(6)).toMatchObject({ ok: false, retryable: true, error: general });
    expect(settled.whole).toBeUndefined();
  });

  it('a failure with no per-partition answer fails every message with the general verdict, and says so', () => {
    const general = new PublishError('general', { retryable: true, code: BROKER_UNAVAILABLE });
    const settled = settleFailedSend([item(0, 't', 0), item(1, 't', 1)], kafkaError('down'), general);
    expect([...settled.outcomes.values()]).toEqual([
      { ok: false, retryable: true, error: general },
      { ok: false, retryable: true, error: general },
    ]);
    expect(settled.again).toEqual([]);
    expect(settled.whole).toBe(general);
  });
});
