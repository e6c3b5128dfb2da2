/**
 * `tx-outbox relay --metrics-port N [--metrics-host H]` (or `"metrics": { "port": N, "host": H }`
 * in the config file): a prom-client registry with the process metrics, handed to the relay,
 * and served with `/healthz` and `/readyz` until the relay stops.
 */

import type { Command } from 'commander';
import type pg from 'pg';
import type { Logger as PinoLogger } from 'pino';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { OutboxError } from '../errors.js';
import { type MetricsServer, serveMetrics } from '../ops/http.js';
import type { Relay } from '../relay/relay.js';
import { CliError, integerOption, nonEmptyOption, usageError } from './common.js';
import type { RelayConfig } from './config.js';

/** The flags {@link addMetricsOptions} adds. */
export interface MetricsFlags {
  readonly metricsPort?: number;
  readonly metricsHost?: string;
}

/** Where to serve, and which flag or field said so (for error messages). */
export interface MetricsEndpoint {
  readonly port: number;
  readonly host: string;
  /** `--metrics-port`, or `config file <file>: metrics.port`. */
  readonly origin: string;
}

export const DEFAULT_METRICS_HOST = '127.0.0.1';

export function addMetricsOptions(command: Command): Command {
  return command
    .option(
      '--metrics-port <port>',
      'serve /metrics, /healthz and /readyz on this port, e.g. 9464 (0: any free port, logged)',
      integerOption(0, 65_535),
    )
    .option(
      '--metrics-host <host>',
      `interface for --metrics-port (default ${DEFAULT_METRICS_HOST}; 0.0.0.0 for every interface)`,
      nonEmptyOption,
    );
}

/** The endpoint from the flags, else from the config file's `metrics`; undefined when neither asks. */
export function metricsEndpoint(
  flags: MetricsFlags,
  config: { readonly file: string; readonly metrics: RelayConfig['metrics'] } | undefined,
): MetricsEndpoint | undefined {
  if (flags.metricsPort !== undefined) {
    return {
      port: flags.metricsPort,
      host: flags.metricsHost ?? config?.metrics?.host ?? DEFAULT_METRICS_HOST,
      origin: '--metrics-port',
    };
  }
  const metrics = config?.metrics;
  if (metrics === undefined) {
    if (flags.metricsHost !== undefined) throw usageError('--metrics-host needs --metrics-port <port>');
    return undefined;
  }
  return {
    port: metrics.port,
    host: flags.metricsHost ?? metrics.host ?? DEFAULT_METRICS_HOST,
    origin: `config file ${config?.file}: metrics.port`,
  };
}

/**
 * prom-client's gauges named like counters, which `promtool check metrics` flags ("non-counter
 * metrics should not have _total suffix"); each is the sum of a per-type gauge kept beside it
 * (`nodejs_active_handles{type}` …), so nothing is lost without them.
 */
const LINT_FAILING_DEFAULTS = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
] as const;

/** A registry of the relay's metrics plus the process's (CPU, memory, event loop lag, GC). */
export function relayRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  for (const name of LINT_FAILING_DEFAULTS) registry.removeSingleMetric(name);
  return registry;
}

/** Serves the endpoints for `relay`; a port that cannot be bound is an error naming its flag or field. */
export async function serveRelayMetrics(
  endpoint: MetricsEndpoint,
  parts: {
    readonly pool: pg.Pool;
    readonly relay: Relay;
    readonly registry: Registry;
    readonly logger: PinoLogger;
  },
): Promise<MetricsServer> {
  try {
    return await serveMetrics({
      pool: parts.pool,
      relay: parts.relay,
      registry: parts.registry,
      port: endpoint.port,
      host: endpoint.host,
      logger: parts.logger.child({ component: 'metrics' }),
    });
  } catch (error) {
    if (error instanceof OutboxError && error.code === 'TXO_METRICS_LISTEN') {
      throw new CliError(`${endpoint.origin} ${endpoint.port}: ${error.message}`, 1, { cause: error });
    }
    throw error;
  }
}
