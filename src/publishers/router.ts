/**
 * A publisher that routes each message to one of several publishers by rules
 * on its type, aggregate type or topic — one relay feeding several brokers or
 * destinations. Rules are tried in order; the first match wins. A rule may
 * rewrite the message's topic for its publisher. A message no rule matches,
 * with no fallback, fails permanently with a clear error. A skip marker (`dead skip`) is routed
 * by the type of the event it stands for.
 */
import { OutboxError, OutboxValidationError, PublishError } from '../errors.js';
import { routedType } from '../skip-marker.js';
import type { OutboxMessage, Publisher, PublishOutcome } from './contract.js';

export interface RouteMatch {
  /** Event type pattern: exact, or with `*` wildcards (`order.*`, `*.created`). */
  readonly type?: string;
  readonly aggregateType?: string;
  readonly topic?: string;
}

export interface Route {
  readonly match: RouteMatch;
  readonly publisher: Publisher;
  /** Topic to publish under instead of the event's own. */
  readonly topic?: string;
}

export interface RouterOptions {
  readonly routes: readonly Route[];
  /** Where unmatched messages go. Without it they fail permanently. */
  readonly fallback?: Publisher;
}

function globToRegExp(pattern: string): RegExp {
  const escaped = pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replaceAll('*', '.*');
  return new RegExp(`^${escaped}$`);
}

interface CompiledRoute {
  readonly test: (m: OutboxMessage) => boolean;
  readonly publisher: Publisher;
  readonly topic: string | undefined;
}

function compile(route: Route, index: number): CompiledRoute {
  const { match } = route;
  if (
    !match ||
    (match.type === undefined && match.aggregateType === undefined && match.topic === undefined)
  ) {
    throw new OutboxValidationError(
      `routes[${index}].match`,
      'is empty',
      'Match on at least one of type, aggregateType or topic (use the fallback for everything else).',
    );
  }
  if (!route.publisher || typeof route.publisher.publish !== 'function') {
    throw new OutboxValidationError(
      `routes[${index}].publisher`,
      'is missing',
      'Give each route a publisher.',
    );
  }
  const type = match.type === undefined ? undefined : globToRegExp(match.type);
  const aggregateType = match.aggregateType === undefined ? undefined : globToRegExp(match.aggregateType);
  const topic = match.topic === undefined ? undefined : globToRegExp(match.topic);
  return {
    test: (m) =>
      (type === undefined || type.test(routedType(m))) &&
      (aggregateType === undefined || aggregateType.test(m.aggregateType)) &&
      (topic === undefined || (m.topic !== null && topic.test(m.topic))),
    publisher: route.publisher,
    topic: route.topic,
  };
}

export function routerPublisher(options: RouterOptions): Publisher {
  const routes = (options.routes ?? []).map(compile);
  const fallback = options.fallback;
  const publishers = [...new Set([...routes.map((r) => r.publisher), ...(fallback ? [fallback] : [])])];
  let closed = false;

  function routeOf(m: OutboxMessage): { publisher: Publisher; message: OutboxMessage } | undefined {
    for (const r of routes) {
      if (r.test(m))
        return { publisher: r.publisher, message: r.topic === undefined ? m : { ...m, topic: r.topic } };
    }
    return fallback ? { publisher: fallback, message: m } : undefined;
  }

  return {
    name: `router(${publishers.map((p) => p.name).join(',')})`,
    kind: 'router',
    async publish(batch, signal) {
      if (closed) throw new OutboxError('The router publisher is closed', { code: 'TXO_PUBLISHER_CLOSED' });
      const outcomes: PublishOutcome[] = new Array(batch.length);
      const groups = new Map<Publisher, { indexes: number[]; messages: OutboxMessage[] }>();
      batch.forEach((m, i) => {
        const route = routeOf(m);
        if (!route) {
          const error = new PublishError(
            `no route for event type "${m.type}" (aggregate type "${m.aggregateType}", topic ${JSON.stringify(m.topic)}): add a route or a default publisher`,
            { retryable: false, code: 'TXO_NO_ROUTE' },
          );
          outcomes[i] = { ok: false, retryable: false, error };
          return;
        }
        const group = groups.get(route.publisher) ?? { indexes: [], messages: [] };
        group.indexes.push(i);
        group.messages.push(route.message);
        groups.set(route.publisher, group);
      });
      await Promise.all(
        [...groups].map(async ([publisher, group]) => {
          let results: PublishOutcome[];
          try {
            results = await publisher.publish(group.messages, signal);
          } catch (error) {
            const e = error instanceof Error ? error : new Error(String(error));
            results = group.messages.map(() => ({ ok: false, retryable: true, error: e }));
          }
          group.indexes.forEach((index, k) => {
            outcomes[index] = results[k] ?? {
              ok: false,
              retryable: true,
              error: new Error(`publisher ${publisher.name} returned no outcome`),
            };
          });
        }),
      );
      return outcomes;
    },
    async close() {
      if (closed) return;
      closed = true;
      await Promise.all(publishers.map((p) => p.close()));
    },
  };
}
