/**
 * The connection under the publisher: the one it opened from `url` (owned: it listens for its
 * errors and closes it) or the one it was given (`client`: never closed here), with what the
 * broker said about it (closed, why, blocked by a resource alarm).
 */
import {
  type ChannelModel,
  connect,
  type Options,
  type RecoveringChannelModel,
  type SocketOptions,
} from 'amqplib';
import { redactUrl } from '../../redact.js';
import { closeWithin } from '../core/lifecycle.js';

/** An amqplib connection: a plain one, or one made with `recovery` (it reconnects on its own). */
export type AmqpConnection = ChannelModel | RecoveringChannelModel;

/** A connection: the one the publisher opened from `url`, or the one it was given. */
export interface Link {
  readonly model: AmqpConnection;
  readonly owned: boolean;
  closed: boolean;
  /** Why the connection closed (owned connections only). */
  error: Error | undefined;
  /** The broker's reason while it blocks publishing (memory or disk alarm). */
  blocked: string | undefined;
  detach(): void;
}

/** Opens a connection from `url`, named `tx-outbox publisher` unless `clientOptions` names it. */
export function connectOwned(
  url: string | Options.Connect,
  clientOptions: SocketOptions | undefined,
  timeoutMs: number,
): Promise<ChannelModel> {
  const clientProperties = { connection_name: 'tx-outbox publisher', ...clientOptions?.clientProperties };
  return connect(url, { timeout: timeoutMs, ...clientOptions, clientProperties });
}

/**
 * Follows a connection's `blocked`/`unblocked` (and, when owned, its `error` and `close`: an
 * unheard `error` event would crash the process).
 */
export function attachLink(model: AmqpConnection, owned: boolean): Link {
  const link: Link = {
    model,
    owned,
    closed: false,
    error: undefined,
    blocked: undefined,
    detach: () => undefined,
  };
  const onError = (error: Error): void => {
    link.error = error;
  };
  const onClose = (error?: Error): void => {
    link.closed = true;
    if (error !== undefined) link.error ??= error;
    link.blocked = undefined;
  };
  const onBlocked = (reason: string): void => {
    link.blocked = String(reason || 'resource alarm');
  };
  const onUnblocked = (): void => {
    link.blocked = undefined;
  };
  model.on('blocked', onBlocked);
  model.on('unblocked', onUnblocked);
  if (owned) {
    model.on('error', onError);
    model.on('close', onClose);
  }
  link.detach = () => {
    model.off('blocked', onBlocked);
    model.off('unblocked', onUnblocked);
    // An owned connection keeps its 'error' listener: a late error must not crash anything.
  };
  return link;
}

/**
 * Stops following the link and closes it when owned, each step within `timeoutMs`; a
 * connection whose close handshake never completes (broker gone silent) has its socket dropped.
 */
export async function closeLink(link: Link, timeoutMs: number): Promise<void> {
  link.detach();
  if (!link.owned || link.closed) return;
  const closed = await closeWithin(link.model.close(), timeoutMs);
  if (!closed)
    (link.model as { connection?: { stream?: { destroy?(): void } } }).connection?.stream?.destroy?.();
}

/** The URL for an error message, without its password. */
export function describeUrl(url: string | Options.Connect): string {
  if (typeof url !== 'string') {
    return `${url.protocol ?? 'amqp'}://${url.hostname ?? 'localhost'}:${url.port ?? 5672}${url.vhost ? `/${url.vhost}` : ''}`;
  }
  return redactUrl(url);
}
