import { describe, expect, it } from 'vitest';
import { BROKER_UNAVAILABLE, isBrokerUnavailable, PublishError } from '../../src/errors.js';
import type { PublishOutcome } from '../../src/publishers/contract.js';
import * as rabbit from '../../src/publishers/rabbitmq/classify.js';
import type { Item } from '../../src/publishers/rabbitmq/wire.js';

const item: Item = {
  eventId: 'ev-1',
  exchange: 'orders',
  routingKey: 'orders.created',
  content: Buffer.alloc(300),
  options: {},
  propertiesBytes: 100,
};

/** A channel error as amqplib reports the broker closing a channel. */
function channelError(code: number, text: string): rabbit.ChannelError {
  return Object.assign(new Error(`Channel closed by server: ${code} with message "${text}"`), { code });
}

function failure(outcome: PublishOutcome | undefined, retryable: boolean): PublishError {
  if (outcome === undefined || outcome.ok)
    throw new Error(`expected a failure, got ${JSON.stringify(outcome)}`);
  expect(outcome.retryable).toBe(retryable);
  expect(outcome.error).toBeInstanceOf(PublishError);
  expect((outcome.error as PublishError).retryable).toBe(retryable);
  return outcome.error as PublishError;
}

describe('channel errors', () => {
  const size = channelError(
    406,
    'PRECONDITION_FAILED - message size 134217729 is larger than configured max size 134217728',
  );
  const missing = channelError(404, "NOT_FOUND - no exchange 'txo-x' in vhost '/'");
  const forbidden = channelError(
    403,
    "ACCESS_REFUSED - access to exchange 'secret' in vhost '/' refused for user 'u'",
  );

  it('brokerSizeLimit reads max_message_size from a 406 size refusal only', () => {
    expect(rabbit.brokerSizeLimit(size)).toBe(134_217_728);
    expect(
      rabbit.brokerSizeLimit(channelError(406, 'PRECONDITION_FAILED - inequivalent arg')),
    ).toBeUndefined();
    expect(rabbit.brokerSizeLimit({ ...size, message: size.message, code: 404 })).toBeUndefined();
    expect(rabbit.brokerSizeLimit(undefined)).toBeUndefined();
  });

  it('refusedExchange names the exchange of a 404 (missing) or 403 (forbidden)', () => {
    expect(rabbit.refusedExchange(missing)).toBe('txo-x');
    expect(rabbit.refusedExchange(forbidden)).toBe('secret');
    expect(
      rabbit.refusedExchange(channelError(404, "NOT_FOUND - no queue 'q' in vhost '/'")),
    ).toBeUndefined();
    expect(rabbit.refusedExchange(size)).toBeUndefined();
    expect(rabbit.refusedExchange(undefined)).toBeUndefined();
  });

  it('isExchangeRefusal: 404, 403 and 406 are about the exchange; anything else is the link', () => {
    expect(rabbit.isExchangeRefusal(missing)).toBe(true);
    expect(rabbit.isExchangeRefusal(forbidden)).toBe(true);
    expect(rabbit.isExchangeRefusal(channelError(406, 'x'))).toBe(true);
    expect(rabbit.isExchangeRefusal(channelError(320, 'CONNECTION_FORCED'))).toBe(false);
    expect(rabbit.isExchangeRefusal(new Error('socket closed'))).toBe(false);
    expect(rabbit.isExchangeRefusal(null)).toBe(false);
  });

  it('exchangeRefused is retryable, not BROKER_UNAVAILABLE, and says what to do', () => {
    const gone = rabbit.exchangeRefused('txo-x', missing);
    expect(gone.retryable).toBe(true);
    expect(isBrokerUnavailable(gone)).toBe(false);
    expect(gone.cause).toBe(missing);
    expect(gone.message).toContain(
      'exchange "txo-x" does not exist (declare it, or set assertExchange: true)',
    );
    expect(rabbit.exchangeRefused('secret', forbidden).message).toContain("check the user's permissions");
    expect(rabbit.exchangeRefused('e', channelError(406, 'x')).message).toContain(
      'other settings than a durable topic',
    );
  });

  it('channelLost is BROKER_UNAVAILABLE with the reason when known', () => {
    const error = failure(rabbit.channelLost(item, 'CONNECTION_FORCED', missing), true);
    expect(error.code).toBe(BROKER_UNAVAILABLE);
    expect(error.message).toBe(
      'The RabbitMQ channel closed before event ev-1 was confirmed: CONNECTION_FORCED ' +
        '(the relay publishes it again, same message-id)',
    );
    expect(error.cause).toBe(missing);
    expect(failure(rabbit.channelLost(item, undefined, undefined), true).message).toContain(
      'confirmed (the relay',
    );
  });
});

describe('confirms', () => {
  it("nacked: only amqplib's nack is a nack (retryable, the message is charged)", () => {
    const error = failure(rabbit.nacked(item, new Error(rabbit.NACKED)), true);
    expect(error.message).toContain(
      'RabbitMQ nacked event ev-1 (exchange "orders", routing key "orders.created")',
    );
    expect(isBrokerUnavailable(error)).toBe(false);
    expect(rabbit.nacked(item, new Error('channel closed'))).toBeUndefined();
    expect(rabbit.nacked(item, rabbit.NACKED)).toBeUndefined();
  });

  it('unroutable is permanent and names exchange, routing key and the reply', () => {
    const fields = { replyCode: 312, replyText: 'NO_ROUTE' } as never;
    const error = failure(rabbit.unroutable(item, fields), false);
    expect(error.code).toBe('TXO_PUBLISH_PERMANENT');
    expect(error.message).toContain('unroutable (312 NO_ROUTE)');
    expect(error.message).toContain('exchange "orders" for routing key "orders.created"');
  });

  it('confirmOverdue: a link in doubt is BROKER_UNAVAILABLE, an unanswered message is charged', () => {
    const live = { blocked: undefined, channelClosed: false, silent: false };
    const charged = failure(rabbit.confirmOverdue('ev-1', 500, live), true);
    expect(charged.message).toBe('Timed out after 500 ms waiting for RabbitMQ to confirm event ev-1');
    expect(isBrokerUnavailable(charged)).toBe(false);
    const silent = failure(rabbit.confirmOverdue('ev-1', 500, { ...live, silent: true }), true);
    expect(silent.message).toContain('the connection is in doubt');
    expect(isBrokerUnavailable(silent)).toBe(true);
    const closed = failure(
      rabbit.confirmOverdue('ev-1', 500, { ...live, channelClosed: true, silent: true }),
      true,
    );
    expect(closed.message).toContain('(the channel closed)');
    expect(isBrokerUnavailable(closed)).toBe(true);
    const blocked = failure(
      rabbit.confirmOverdue('ev-1', 500, { ...live, blocked: 'low on memory', channelClosed: true }),
      true,
    );
    expect(blocked.message).toContain('(the broker blocks the connection: low on memory)');
    expect(isBrokerUnavailable(blocked)).toBe(true);
  });
});

describe('refusals before sending', () => {
  it('tooLarge is permanent and names both sizes', () => {
    expect(failure(rabbit.tooLarge('ev-1', 2_000, 1_000), false).message).toBe(
      'Event ev-1 is 2000 bytes: larger than the 1000 bytes RabbitMQ accepts (max_message_size / maxMessageBytes)',
    );
  });

  it('blocked and stalled connections are BROKER_UNAVAILABLE', () => {
    expect(isBrokerUnavailable(rabbit.blockedError('disk alarm'))).toBe(true);
    expect(rabbit.blockedError('disk alarm').message).toContain('(disk alarm)');
    expect(rabbit.stalled(undefined, 300).message).toBe(
      'RabbitMQ did not read from the connection for 300 ms',
    );
    expect(rabbit.stalled('memory', 300).message).toContain('(it blocks publishing: memory)');
    expect(isBrokerUnavailable(rabbit.stalled(undefined, 300))).toBe(true);
  });

  it("an aborted call is retryable: the caller's reason, or the close", () => {
    const reason = new Error('relay stopping');
    const byCaller = rabbit.abortedCall('caller', reason);
    expect(byCaller.message).toBe('Publish aborted before its confirm arrived: relay stopping');
    expect(byCaller.cause).toBe(reason);
    expect(byCaller.retryable).toBe(true);
    const byClose = rabbit.abortedCall('closed', new Error('whatever'));
    expect(byClose.message).toBe('The RabbitMQ publisher was closed before the confirm arrived');
    expect(byClose.retryable).toBe(true);
    expect(isBrokerUnavailable(byClose)).toBe(false);
    expect(rabbit.cancelledBeforeSend(item).message).toBe(
      'Publish of event ev-1 was cancelled before sending',
    );
  });

  it('a defect in the publish path leaves the messages retryable', () => {
    const error = failure(rabbit.publishDefect(new TypeError('bug')), true);
    expect(error.message).toBe('RabbitMQ publish failed: bug');
  });
});
