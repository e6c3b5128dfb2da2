/**
 * The inbox's `process <destination>` span: kind CONSUMER, around one `inbox.handle` (the inbox's
 * statements and the handler, which runs with it active, so its own spans nest under it). Its
 * parent is the publish span whose context the message carries, with a span link to it as well
 * (`processParent: 'message'`, the default), or a new trace with only the link (`'link'`).
 * Nothing is started when no tracer provider is registered.
 */
import type { Link, Span } from '@opentelemetry/api';
import { OutboxValidationError } from '../errors.js';
import { redactText } from '../redact.js';
import {
  ATTR_CONSUMER_GROUP,
  ATTR_DESTINATION,
  ATTR_INBOX_STATUS,
  ATTR_MESSAGE_ID,
  ATTR_OPERATION_NAME,
  ATTR_OPERATION_TYPE,
  ATTR_SEQUENCE,
  ATTR_SYSTEM,
} from './messaging.js';
import { loadedOtelApi, loadOtelApi, tracerOf } from './otel-api.js';
import { recordFailure } from './span-error.js';
import { remoteSpanContext } from './trace-context.js';

/** The inbox's tracing: where the `process` span's parent comes from. */
export interface InboxTracingOptions {
  /**
   * `'message'` (default): the span continues the message's trace, its parent the relay's publish
   * span (and a link to it). `'link'`: each delivery starts a new trace, linked to the publish span.
   */
  readonly processParent?: 'message' | 'link';
}

/** What the span reads of an `InboxMessage` (src/inbox/ is downstream of this folder). */
export interface TracedMessage {
  readonly eventId: string;
  readonly sequence: number;
  readonly headers: Readonly<Record<string, string>>;
}

/** Where a consumer adapter received a message: the `process` span's system and destination. */
export interface Delivery {
  readonly system: string;
  readonly destination: string;
}

const deliveries = new WeakMap<TracedMessage, Delivery>();

/** Notes where an adapter received `message` (the subject, topic, queue, stream or path). */
export function noteDelivery<M extends TracedMessage>(message: M, delivery: Delivery): M {
  deliveries.set(message, delivery);
  return message;
}

/** What `inbox.handle` answered, as far as the span is concerned. */
interface Answer {
  readonly status: string;
  readonly reason?: string;
  readonly error?: Error;
}

export class ProcessTracing {
  readonly #consumer: string;
  readonly #asRoot: boolean;

  constructor(consumer: string, options: InboxTracingOptions | undefined) {
    if (options !== undefined && (typeof options !== 'object' || options === null)) {
      throw new OutboxValidationError(
        'tracing',
        `is ${String(options)}`,
        "Pass { processParent: 'message' | 'link' }.",
      );
    }
    const parent = options?.processParent ?? 'message';
    if (parent !== 'message' && parent !== 'link') {
      throw new OutboxValidationError(
        'tracing.processParent',
        `is ${JSON.stringify(parent)}`,
        "Pass 'message' (continue the message's trace) or 'link' (a new trace linked to it).",
      );
    }
    this.#consumer = consumer;
    this.#asRoot = parent === 'link';
    void loadOtelApi();
  }

  /** Runs `handle` inside the message's `process` span, or as it is when tracing is off. */
  async around<R extends Answer>(message: TracedMessage, handle: () => Promise<R>): Promise<R> {
    let otel = loadedOtelApi();
    if (otel === undefined) otel = await loadOtelApi();
    const tracer = otel ? tracerOf(otel) : undefined;
    if (!otel || !tracer) return handle();
    const delivery = deliveries.get(message);
    const remote = remoteSpanContext(otel, message.headers);
    const links: Link[] = remote ? [{ context: remote }] : [];
    // Without a trace context in the message, the caller's (a consumer's own span, if any).
    const active = otel.context.active();
    const parent = remote && !this.#asRoot ? otel.trace.setSpanContext(active, remote) : active;
    const attributes: Record<string, string | number> = {
      [ATTR_MESSAGE_ID]: message.eventId,
      [ATTR_CONSUMER_GROUP]: this.#consumer,
      [ATTR_OPERATION_TYPE]: 'process',
      [ATTR_OPERATION_NAME]: 'process',
      [ATTR_SEQUENCE]: message.sequence,
    };
    if (delivery) {
      attributes[ATTR_SYSTEM] = delivery.system;
      attributes[ATTR_DESTINATION] = delivery.destination;
    }
    const span: Span = tracer.startSpan(
      delivery ? `process ${delivery.destination}` : 'process',
      { kind: otel.SpanKind.CONSUMER, attributes, links, root: this.#asRoot },
      parent,
    );
    try {
      const answer = await otel.context.with(otel.trace.setSpan(parent, span), handle);
      span.setAttribute(ATTR_INBOX_STATUS, answer.status);
      if (answer.error) recordFailure(otel, span, answer.error);
      else if (answer.status === 'quarantined') {
        // Parked, not processed: a failure of this delivery (why, in the status message).
        span.setAttribute('error.type', 'quarantined');
        span.setStatus({ code: otel.SpanStatusCode.ERROR, message: redactText(answer.reason ?? '') });
      }
      return answer;
    } catch (error) {
      recordFailure(otel, span, error);
      throw error;
    } finally {
      span.end();
    }
  }
}
