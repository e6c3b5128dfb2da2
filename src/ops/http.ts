/**
 * The operations endpoints of a relay process, on node:http: `/metrics` (a prom-client
 * registry), `/healthz` (the process is alive) and `/readyz` (the cached readiness report, see
 * {@link ReadinessMonitor}). Bound to 127.0.0.1 unless told otherwise: metrics name schemas,
 * publishers and relay ids, which are not for the whole network by default.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Pool } from 'pg';
import { Gauge, type Registry } from 'prom-client';
import { errorMessage, OutboxError, OutboxValidationError } from '../errors.js';
import { type Logger, silentLogger } from '../logger.js';
import { redactText } from '../redact.js';
import { type HealthSource, ReadinessMonitor, type ReadinessReport } from './readiness.js';

/** The gauge the readiness check sets (the shared metric name contract). */
export const RELAY_READY_METRIC = 'tx_outbox_relay_ready';

export interface ServeMetricsOptions {
  /** The database the relay works on: the readiness check asks it `SELECT 1`-sized questions. */
  readonly pool: Pool;
  /** Served at `/metrics`; without one, `/metrics` answers 404. */
  readonly registry?: Registry;
  /**
   * The relay whose readiness `/readyz` reports (running, broker reachable, holding partitions
   * or a live standby), and whose `tx_outbox_relay_ready` gauge is set in `registry`. Without
   * one, `/readyz` checks the database only.
   */
  readonly relay?: HealthSource;
  /** TCP port; 0 picks a free one (see {@link MetricsServer.port}). */
  readonly port: number;
  /** Interface to bind. Default `127.0.0.1`; `0.0.0.0` (or `::`) to be scraped from elsewhere. */
  readonly host?: string;
  /** How often the readiness checks run in the background, ms. Default 5000. */
  readonly checkIntervalMs?: number;
  /** Time limit of the database check, ms. Default 500. */
  readonly checkTimeoutMs?: number;
  /**
   * Connections served at once; one more is closed as soon as it is accepted (and logged). Default
   * 64: a scraper and a few probes need a handful, and a flood of idle connections cannot use up
   * the process's descriptors, which the relay needs for its database and broker.
   */
  readonly maxConnections?: number;
  /**
   * A connection with no request under way is closed after this long without traffic, ms: one
   * that sends nothing, kept alive after its answer, or sending its headers slowly (at most this
   * long for the whole header). A scrape takes milliseconds; an answer still being computed is
   * never cut. Default 5000.
   */
  readonly idleTimeoutMs?: number;
  readonly logger?: Logger;
}

/** A running endpoint server; {@link close} it on shutdown. */
export interface MetricsServer {
  /** `http://host:port`, with the port actually bound. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** The readiness report `/readyz` answers with now. */
  readiness(): ReadinessReport;
  /** Stops the checks and the server, dropping idle keep-alive connections; idempotent. */
  close(): Promise<void>;
}

interface Resolved {
  readonly pool: Pool;
  readonly registry: Registry | undefined;
  readonly relay: HealthSource | undefined;
  readonly port: number;
  readonly host: string;
  readonly checkIntervalMs: number;
  readonly checkTimeoutMs: number;
  readonly maxConnections: number;
  readonly idleTimeoutMs: number;
  readonly logger: Logger;
}

/** Default of {@link ServeMetricsOptions.maxConnections}. */
export const DEFAULT_MAX_CONNECTIONS = 64;
/** Default of {@link ServeMetricsOptions.idleTimeoutMs}. */
export const DEFAULT_IDLE_TIMEOUT_MS = 5000;
/** Between two reports of connections refused over the cap, at most. */
const DROP_REPORT_MS = 60_000;

/**
 * Serves `/metrics`, `/healthz` and `/readyz` until closed. Resolves once listening; the first
 * readiness check has started by then (`/readyz` is 503 until it finished and passed).
 *
 * - `/metrics`: `registry.metrics()` in the registry's content type (500 if a collector fails).
 * - `/healthz`: 200 `ok` while the event loop runs.
 * - `/readyz`: 200 when every check passed, else 503; the body is the JSON report naming each
 *   check, its result and detail, and the failing ones.
 *
 * @throws OutboxValidationError for a bad option (names the field).
 * @throws OutboxError `TXO_METRICS_LISTEN` when the address cannot be bound (in use, not local).
 */
export async function serveMetrics(options: ServeMetricsOptions): Promise<MetricsServer> {
  const o = resolveOptions(options);
  const ready = o.relay !== undefined && o.registry !== undefined ? readyGauge(o.registry) : undefined;
  const health = o.relay?.health();
  const labels = health === undefined ? undefined : { schema: health.schema, publisher: health.publisher };
  const monitor = new ReadinessMonitor({
    pool: o.pool,
    relay: o.relay,
    timeoutMs: o.checkTimeoutMs,
    logger: o.logger,
    onReport: (report) => {
      if (ready !== undefined && labels !== undefined) ready.set(labels, report.ready ? 1 : 0);
    },
  });
  if (ready !== undefined && labels !== undefined) ready.set(labels, 0);
  const server = boundedServer(o, (request, response) => {
    void answer(request, response, o, monitor);
  });
  await listen(server, o).catch(async (error: unknown) => {
    await monitor.stop();
    throw error;
  });
  monitor.start(o.checkIntervalMs);
  const address = server.address() as AddressInfo;
  const port = address.port;
  const host = o.host;
  const url = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  o.logger.info({ url }, 'serving /metrics, /healthz and /readyz');
  let closing: Promise<void> | undefined;
  return {
    url,
    host,
    port,
    readiness: () => monitor.report,
    close: () => {
      closing ??= closeServer(server, monitor);
      return closing;
    },
  };
}

/**
 * An HTTP server that holds at most `maxConnections` and drops idle ones: a connection that
 * has no request under way (it sent nothing, is kept alive after its answer) is destroyed after
 * `idleTimeoutMs` without traffic, and a request's header must arrive within that time too. A
 * connection over the cap is closed at once; the first in a while is logged with the count.
 */
function boundedServer(
  o: Resolved,
  handle: (request: IncomingMessage, response: ServerResponse) => void,
): Server {
  // Answers under way per connection (pipelined requests may overlap).
  const answering = new Map<Socket, number>();
  // How often Node checks headersTimeout and requestTimeout (by default only every 30 s).
  const checkEveryMs = Math.max(25, Math.min(1000, Math.floor(o.idleTimeoutMs / 4)));
  const server = createServer({ connectionsCheckingInterval: checkEveryMs }, (request, response) => {
    const socket = request.socket;
    answering.set(socket, (answering.get(socket) ?? 0) + 1);
    response.once('close', () => {
      const left = (answering.get(socket) ?? 1) - 1;
      if (left > 0) return void answering.set(socket, left);
      answering.delete(socket);
      // Idle from now: Node itself would wait keepAliveTimeout plus a margin of its own.
      if (!socket.destroyed) socket.setTimeout(o.idleTimeoutMs);
    });
    handle(request, response);
  });
  server.maxConnections = o.maxConnections;
  server.headersTimeout = o.idleTimeoutMs;
  server.requestTimeout = o.idleTimeoutMs; // GET and HEAD carry no body: headers are the request
  server.keepAliveTimeout = o.idleTimeoutMs;
  server.timeout = o.idleTimeoutMs;
  // Without a listener Node destroys every socket that times out, an answer under way included.
  server.on('timeout', (socket: Socket) => {
    if (!answering.has(socket)) socket.destroy();
  });
  let dropped = 0;
  let reportedAt = Number.NEGATIVE_INFINITY;
  server.on('drop', () => {
    dropped += 1;
    const now = Date.now();
    if (now - reportedAt < DROP_REPORT_MS) return;
    reportedAt = now;
    o.logger.warn(
      { maxConnections: o.maxConnections, refused: dropped },
      'metrics server at its connection cap: closed new connections (idle ones are closed after idleTimeoutMs)',
    );
    dropped = 0;
  });
  return server;
}

function listen(server: Server, o: Resolved): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException): void => {
      reject(
        new OutboxError(`cannot serve metrics on ${o.host}:${o.port}: ${error.code ?? error.message}`, {
          code: 'TXO_METRICS_LISTEN',
          cause: error,
        }),
      );
    };
    server.once('error', onError);
    server.listen(o.port, o.host, () => {
      server.off('error', onError);
      server.on('error', (error) => o.logger.warn({ err: error }, 'metrics server error'));
      resolve();
    });
  });
}

async function closeServer(server: Server, monitor: ReadinessMonitor): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  await Promise.all([closed, monitor.stop()]);
}

async function answer(
  request: IncomingMessage,
  response: ServerResponse,
  o: Resolved,
  monitor: ReadinessMonitor,
): Promise<void> {
  const path = (request.url ?? '/').split('?')[0];
  const head = request.method === 'HEAD';
  try {
    if (request.method !== 'GET' && !head) {
      return send(response, head, 405, 'text/plain; charset=utf-8', 'only GET and HEAD\n', {
        allow: 'GET, HEAD',
      });
    }
    switch (path) {
      case '/metrics':
        if (o.registry === undefined) {
          return send(response, head, 404, 'text/plain; charset=utf-8', 'no metrics registry\n');
        }
        return send(response, head, 200, o.registry.contentType, await o.registry.metrics());
      case '/healthz':
        return send(response, head, 200, 'text/plain; charset=utf-8', 'ok\n');
      case '/readyz': {
        const report = monitor.report;
        return send(
          response,
          head,
          report.ready ? 200 : 503,
          'application/json; charset=utf-8',
          `${JSON.stringify(readinessBody(report))}\n`,
        );
      }
      default:
        return send(
          response,
          head,
          404,
          'text/plain; charset=utf-8',
          'not found: try /metrics, /healthz, /readyz\n',
        );
    }
  } catch (error) {
    const message = redactText(errorMessage(error));
    o.logger.warn({ err: error, path }, 'metrics request failed');
    if (!response.headersSent) send(response, head, 500, 'text/plain; charset=utf-8', `${message}\n`);
    else response.destroy();
  }
}

/** The `/readyz` body: the report, with a word for "not checked yet". */
export function readinessBody(report: ReadinessReport): Record<string, unknown> {
  return {
    status: report.ready ? 'ready' : report.checkedAt === undefined ? 'starting' : 'not ready',
    checkedAt: report.checkedAt?.toISOString() ?? null,
    failing: report.failing,
    checks: report.checks,
  };
}

function send(
  response: ServerResponse,
  head: boolean,
  status: number,
  contentType: string,
  body: string,
  headers: Record<string, string> = {},
): void {
  response.writeHead(status, {
    'content-type': contentType,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    ...headers,
  });
  response.end(head ? undefined : body);
}

/** The registry's `tx_outbox_relay_ready` gauge: the one already there (metrics-core's), or a new one. */
function readyGauge(registry: Registry): Gauge<'schema' | 'publisher'> {
  const existing = registry.getSingleMetric(RELAY_READY_METRIC);
  // Another copy of prom-client has another Gauge class: the type says what it is.
  if (existing instanceof Gauge || (existing as { type?: unknown } | undefined)?.type === 'gauge') {
    return existing as Gauge<'schema' | 'publisher'>;
  }
  return new Gauge({
    name: RELAY_READY_METRIC,
    help: '1 when this relay passes its readiness checks (database, broker, partitions held or a live standby), else 0.',
    labelNames: ['schema', 'publisher'],
    registers: [registry],
  });
}

function resolveOptions(options: ServeMetricsOptions): Resolved {
  const pool = options.pool as Partial<Pool> | undefined;
  if (pool === null || typeof pool !== 'object' || typeof pool.connect !== 'function') {
    throw new OutboxValidationError('pool', 'is not a pg Pool', 'Pass the pool the relay uses.');
  }
  if (!Number.isInteger(options.port) || options.port < 0 || options.port > 65_535) {
    throw new OutboxValidationError(
      'port',
      `${String(options.port)} is not a TCP port`,
      'Give an integer from 1 to 65535 (0 picks a free one), e.g. 9464.',
    );
  }
  const host = options.host ?? '127.0.0.1';
  if (typeof host !== 'string' || host.trim() === '') {
    throw new OutboxValidationError(
      'host',
      'is empty',
      'Give an interface address such as 127.0.0.1 or 0.0.0.0.',
    );
  }
  return {
    pool: options.pool,
    registry: options.registry,
    relay: options.relay,
    port: options.port,
    host,
    checkIntervalMs: integer(options.checkIntervalMs, 5000, 'checkIntervalMs', 100),
    checkTimeoutMs: integer(options.checkTimeoutMs, 500, 'checkTimeoutMs', 1),
    maxConnections: count(options.maxConnections, DEFAULT_MAX_CONNECTIONS, 'maxConnections'),
    idleTimeoutMs: integer(options.idleTimeoutMs, DEFAULT_IDLE_TIMEOUT_MS, 'idleTimeoutMs', 100),
    logger: options.logger ?? silentLogger,
  };
}

function integer(value: number | undefined, fallback: number, field: string, min: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < min || value > 2 ** 31 - 1) {
    throw new OutboxValidationError(
      field,
      `${String(value)} is out of range`,
      `Give an integer of at least ${min} ms.`,
    );
  }
  return value;
}

function count(value: number | undefined, fallback: number, field: string): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1 || value > 65_535) {
    throw new OutboxValidationError(
      field,
      `${String(value)} is out of range`,
      `Give an integer from 1 to 65535, e.g. ${fallback}.`,
    );
  }
  return value;
}
