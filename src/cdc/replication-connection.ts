import type pg from 'pg';
import { OutboxError } from '../errors.js';

/** The replication connection's setup, its start errors said for the operator, and its drain. */

/**
 * The pool's options for a replication connection: `replication: 'database'`, UTC and ISO dates (so
 * timestamptz text parses one way), and no query timeout (the START_REPLICATION query lasts as long as
 * the stream).
 */
export function replicationConfig(connection: pg.ClientConfig): pg.ClientConfig {
  const { query_timeout: _q, statement_timeout: _s, ...rest } = connection;
  const options = [rest.options, '-c TimeZone=UTC -c DateStyle=ISO'].filter(Boolean).join(' ');
  return {
    ...rest,
    replication: 'database',
    options,
    application_name: rest.application_name ?? 'tx-outbox cdc',
  } as pg.ClientConfig;
}

export function startError(cause: unknown, slot: string): Error {
  const error = asError(cause);
  const code = (error as { code?: unknown }).code;
  if (code === '55006') {
    const pid = /PID (\d+)/i.exec(error.message)?.[1];
    return new OutboxError(
      `cdc: slot ${slot} is streamed by another connection (pid ${pid ?? 'unknown'}); ` +
        'one relay streams a slot at a time',
      { code: 'TXO_CDC_SLOT_ACTIVE', retryable: true, cause: error },
    );
  }
  if (code === '55000' && /invalidated|wal_status|lost/i.test(error.message)) {
    return new OutboxError(
      `cdc: replication slot ${slot} is lost (PostgreSQL removed WAL it still needed): ${error.message}`,
      { code: 'TXO_CDC_SLOT_LOST', cause: error },
    );
  }
  if (code === '42501' && /replication/i.test(error.message)) {
    return new OutboxError(
      `cdc: the role may not stream (${error.message}): grant it with ALTER ROLE <role> REPLICATION`,
      { code: 'TXO_CDC_NO_REPLICATION', cause: error },
    );
  }
  if (code === '42704' && /replication slot/i.test(error.message)) {
    return new OutboxError(
      `cdc: replication slot ${slot} does not exist; create it with tx-outbox migrate --cdc`,
      {
        code: 'TXO_CDC_NO_SLOT',
        cause: error,
      },
    );
  }
  return error;
}

export function asError(cause: unknown): Error {
  return cause instanceof Error ? cause : new Error(String(cause));
}

/** Resolves once the client has no query in flight (the stream's query settled). */
export function drained(client: pg.Client): Promise<void> {
  const internal = client as unknown as { _getActiveQuery(): unknown; once(e: 'drain', f: () => void): void };
  if (internal._getActiveQuery() == null) return Promise.resolve();
  return new Promise((resolve) => internal.once('drain', resolve));
}

export async function raceTimeout(promise: Promise<void>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
