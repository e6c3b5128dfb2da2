/**
 * RabbitMQ's refusals turned into outcomes and errors: a message too large, unroutable, nacked
 * or not confirmed in time, an exchange missing or not allowed, a connection blocked or lost.
 * Pure: the publisher hands in what it saw, these say what it means.
 */
import type { Message } from 'amqplib';
import { BROKER_UNAVAILABLE, errorMessage, PublishError } from '../../errors.js';
import { failed, type PublishOutcome } from '../contract.js';
import type { AbortCause } from '../core/call-abort.js';
import { permanent } from '../core/outcomes.js';

/** The message amqplib gives the confirm callback of a nacked message. */
export const NACKED = 'message nacked';
const SIZE_REFUSAL = /message size (\d+) is larger than configured max size (\d+)/;
const NO_EXCHANGE = /no exchange '(.*)' in vhost/;
const EXCHANGE_REFUSED = /access to exchange '(.*)' in vhost '.*' refused/;

/** What a verdict names of a message: its event and where it was sent (a wire `Item` is one). */
export interface Addressed {
  readonly eventId: string;
  readonly exchange: string;
  readonly routingKey: string;
}

/** A channel-closing error from the broker: its AMQP reply code (404, 403, 406 …) and text. */
export type ChannelError = Error & { code?: unknown };

export function tooLarge(eventId: string, bytes: number, max: number): PublishOutcome {
  return permanent(
    `Event ${eventId} is ${bytes} bytes: larger than the ${max} bytes RabbitMQ accepts ` +
      '(max_message_size / maxMessageBytes)',
  );
}

/** The broker returned the (mandatory) message: no queue is bound for its routing key. */
export function unroutable(item: Addressed, fields: Message['fields']): PublishOutcome {
  const code = (fields as { replyCode?: unknown }).replyCode;
  const text = (fields as { replyText?: unknown }).replyText;
  return permanent(
    `RabbitMQ returned event ${item.eventId} as unroutable (${String(code)} ${String(text)}): no queue is ` +
      `bound to exchange "${item.exchange}" for routing key "${item.routingKey}". Bind a queue for this ` +
      'routing key (or give the exchange an alternate exchange), then replay the event',
  );
}

/**
 * The outcome of a confirm callback's error: a nack (retryable: the broker could not take it),
 * or undefined for any other error (the channel closed under the message).
 */
export function nacked(item: Addressed, err: unknown): PublishOutcome | undefined {
  if (!(err instanceof Error) || err.message !== NACKED) return undefined;
  return failed(
    new PublishError(
      `RabbitMQ nacked event ${item.eventId} (exchange "${item.exchange}", routing key ` +
        `"${item.routingKey}"): the broker could not take it (queue full with reject-publish, or an internal error)`,
      { retryable: true, cause: err },
    ),
    true,
  );
}

export function exchangeRefused(exchange: string, cause: ChannelError): PublishError {
  const what =
    cause.code === 404
      ? `exchange "${exchange}" does not exist (declare it, or set assertExchange: true)`
      : cause.code === 403
        ? `access to exchange "${exchange}" was refused (check the user's permissions)`
        : `exchange "${exchange}" exists with other settings than a durable topic exchange`;
  return new PublishError(`RabbitMQ refused to publish: ${what}: ${cause.message}`, {
    retryable: true,
    cause,
  });
}

/** A refusal of checkExchange/assertExchange that is about the exchange (404, 403, 406), not the link. */
export function isExchangeRefusal(error: unknown): error is ChannelError {
  const code = (error as { code?: unknown } | null)?.code;
  return code === 404 || code === 403 || code === 406;
}

/** The `max_message_size` in a channel error refusing a message for its size (406), else undefined. */
export function brokerSizeLimit(error: ChannelError | undefined): number | undefined {
  if (error === undefined || error.code !== 406) return undefined;
  const match = SIZE_REFUSAL.exec(error.message);
  return match === null ? undefined : Number(match[2]);
}

/** The exchange named by a channel error for a missing (404) or forbidden (403) exchange, else undefined. */
export function refusedExchange(error: ChannelError | undefined): string | undefined {
  if (error === undefined || (error.code !== 404 && error.code !== 403)) return undefined;
  const match = (error.code === 404 ? NO_EXCHANGE : EXCHANGE_REFUSED).exec(error.message);
  return match === null ? undefined : match[1];
}

/** The channel closed before the message's confirm: the broker's fault, not the event's. */
export function channelLost(item: Addressed, reason: string | undefined, cause: unknown): PublishOutcome {
  return failed(
    new PublishError(
      `The RabbitMQ channel closed before event ${item.eventId} was confirmed` +
        `${reason === undefined ? '' : `: ${reason}`} (the relay publishes it again, same message-id)`,
      { retryable: true, code: BROKER_UNAVAILABLE, cause },
    ),
    true,
  );
}

/** What the link looked like when a confirm was overdue. */
export interface OverdueState {
  /** The broker's reason while it blocks the connection (resource alarm). */
  readonly blocked: string | undefined;
  readonly channelClosed: boolean;
  /** Nothing heard on the channel since the message was sent. */
  readonly silent: boolean;
}

/**
 * No confirm within `timeoutMs`. A blocked connection, a closed channel, or nothing heard since
 * the send leaves the link in doubt (a stall, a half-open connection): the broker's fault
 * (BROKER_UNAVAILABLE); otherwise the message itself went unanswered.
 */
export function confirmOverdue(eventId: string, timeoutMs: number, state: OverdueState): PublishOutcome {
  const why =
    state.blocked !== undefined
      ? ` (the broker blocks the connection: ${state.blocked})`
      : state.channelClosed
        ? ' (the channel closed)'
        : state.silent
          ? ' (nothing heard from RabbitMQ since it was sent: the connection is in doubt)'
          : '';
  return failed(
    new PublishError(
      `Timed out after ${timeoutMs} ms waiting for RabbitMQ to confirm event ${eventId}${why}`,
      why === '' ? { retryable: true } : { retryable: true, code: BROKER_UNAVAILABLE },
    ),
    true,
  );
}

export function blockedError(reason: string): PublishError {
  return new PublishError(`RabbitMQ blocks publishing on this connection (${reason})`, {
    retryable: true,
    code: BROKER_UNAVAILABLE,
  });
}

/** The channel's write buffer did not drain within `timeoutMs`. */
export function stalled(blocked: string | undefined, timeoutMs: number): PublishError {
  return new PublishError(
    `RabbitMQ did not read from the connection for ${timeoutMs} ms` +
      (blocked === undefined ? '' : ` (it blocks publishing: ${blocked})`),
    { retryable: true, code: BROKER_UNAVAILABLE },
  );
}

export function cancelledBeforeSend(item: Addressed): PublishError {
  return new PublishError(`Publish of event ${item.eventId} was cancelled before sending`, {
    retryable: true,
  });
}

/** Why a call stopped: the caller's signal aborted (its reason), or the publisher closed meanwhile. */
export function abortedCall(cause: AbortCause, reason: unknown): PublishError {
  if (cause === 'closed') {
    return new PublishError('The RabbitMQ publisher was closed before the confirm arrived', {
      retryable: true,
    });
  }
  return new PublishError(`Publish aborted before its confirm arrived: ${errorMessage(reason)}`, {
    retryable: true,
    cause: reason,
  });
}

/** amqplib refused the message synchronously for something other than a closed channel. */
export function cannotCarry(item: Addressed, error: unknown): PublishOutcome {
  return permanent(`RabbitMQ cannot carry event ${item.eventId}: ${errorMessage(error)}`, error);
}

/** A defect in the publish path, not a verdict on the messages: they stay retryable. */
export function publishDefect(error: unknown): PublishOutcome {
  return failed(
    new PublishError(`RabbitMQ publish failed: ${errorMessage(error)}`, { retryable: true, cause: error }),
    true,
  );
}
