/**
 * The relay's `publish <destination>` spans: one per event, kind PRODUCER, parented on the trace
 * context the event was enqueued under (a root span when it had none: the relay is where the
 * message leaves, as the messaging conventions' "send" span), and injected into the message in
 * place of that context, so the consumer's span is the publish span's child. Nothing is copied or
 * started when no tracer provider is registered.
 */
import type { Span, Tracer } from '@opentelemetry/api';
import type { OutboxMessage, PublishOutcome } from '../publishers/contract.js';
import { defaultDestination } from '../publishers/core/destination.js';
import { defaultTopic } from '../publishers/mqtt/topic.js';
import {
  ATTR_BATCH_COUNT,
  ATTR_DESTINATION,
  ATTR_MESSAGE_ID,
  ATTR_OPERATION_NAME,
  ATTR_OPERATION_TYPE,
  ATTR_SEQUENCE,
  ATTR_SYSTEM,
  messagingSystem,
} from './messaging.js';
import { loadedOtelApi, loadOtelApi, type OtelApi, tracerOf } from './otel-api.js';
import { recordFailure } from './span-error.js';
import { remoteSpanContext, withTraceHeaders } from './trace-context.js';

/** One publish call's spans: the messages to send (trace headers replaced), and how to end them. */
export interface TracedCall {
  readonly messages: readonly OutboxMessage[];
  /** Ends every span with its message's outcome (an error status and the exception on a failure). */
  end(outcomes: readonly PublishOutcome[]): void;
}

export class PublishTracing {
  readonly #system: string;
  readonly #destination: (message: OutboxMessage) => string;

  constructor(publisherName: string) {
    this.#system = messagingSystem(publisherName);
    // The publishers' default destinations; a `destination` option of the user's is not seen here.
    this.#destination = this.#system === 'mqtt' ? defaultTopic : defaultDestination;
  }

  /** Loads the OpenTelemetry API once (a no-op when loaded or absent). */
  ready(): Promise<unknown> | undefined {
    return loadedOtelApi() === undefined ? loadOtelApi() : undefined;
  }

  /** The call's spans, started; undefined (nothing done) when no tracer provider is registered. */
  start(batch: readonly OutboxMessage[]): TracedCall | undefined {
    const otel = loadedOtelApi();
    if (!otel) return undefined;
    const tracer = tracerOf(otel);
    if (!tracer) return undefined;
    return this.#start(otel, tracer, batch);
  }

  #start(otel: OtelApi, tracer: Tracer, batch: readonly OutboxMessage[]): TracedCall {
    const spans: Span[] = new Array(batch.length);
    const messages: OutboxMessage[] = new Array(batch.length);
    for (let i = 0; i < batch.length; i++) {
      const message = batch[i]!;
      const destination = this.#destination(message);
      const remote = remoteSpanContext(otel, message.headers);
      const parent = remote ? otel.trace.setSpanContext(otel.ROOT_CONTEXT, remote) : otel.ROOT_CONTEXT;
      const attributes: Record<string, string | number> = {
        [ATTR_SYSTEM]: this.#system,
        [ATTR_DESTINATION]: destination,
        [ATTR_MESSAGE_ID]: message.eventId,
        [ATTR_OPERATION_TYPE]: 'send',
        [ATTR_OPERATION_NAME]: 'publish',
        [ATTR_SEQUENCE]: message.sequence,
      };
      if (batch.length > 1) attributes[ATTR_BATCH_COUNT] = batch.length;
      const span = tracer.startSpan(
        `publish ${destination}`,
        { kind: otel.SpanKind.PRODUCER, attributes },
        parent,
      );
      spans[i] = span;
      const headers = withTraceHeaders(otel, message.headers, otel.trace.setSpan(parent, span));
      messages[i] = { ...message, headers };
    }
    return {
      messages,
      end(outcomes) {
        for (let i = 0; i < spans.length; i++) {
          const span = spans[i]!;
          const outcome = outcomes[i];
          if (outcome && !outcome.ok) recordFailure(otel, span, outcome.error);
          span.end();
        }
      },
    };
  }
}
