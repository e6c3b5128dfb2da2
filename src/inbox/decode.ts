/**
 * What the inbox accepts and how it reads a payload: the (type, schema version) pairs a consumer
 * understands, each optionally with a Standard Schema validator (zod, valibot, arktype …) whose
 * output types the handler's `event.data`; and `decode`, which checks a message against them.
 */
import { errorMessage } from '../errors.js';
import type { InboxMessage } from './message.js';

/** A Standard Schema validator (zod, valibot, arktype …), typed structurally. */
export interface StandardSchema<T = unknown> {
  readonly '~standard': {
    validate(
      value: unknown,
    ):
      | { value: T; issues?: undefined }
      | { issues: ReadonlyArray<{ message: string }> }
      | Promise<{ value: T; issues?: undefined } | { issues: ReadonlyArray<{ message: string }> }>;
  };
}

/** An event type this consumer understands, with the schema versions it accepts. */
export interface AcceptedEvent {
  readonly type: string;
  readonly schemaVersion: number | readonly number[];
  readonly schema?: StandardSchema;
}

/** What a Standard Schema validator outputs (its declared output type, else what `validate` returns). */
export type SchemaOutput<S> = S extends { readonly '~standard': { readonly types?: infer Types } }
  ? NonNullable<Types> extends { readonly output: infer O }
    ? O
    : S extends StandardSchema<infer V>
      ? V
      : unknown
  : unknown;

/**
 * The handler's `event.data` for an `accepts` list: the union of its schemas' outputs; `unknown`
 * when any accepted event has no schema (its payload is only parsed as JSON) or nothing is listed.
 */
export type AcceptedData<A extends readonly AcceptedEvent[]> = DataOf<A[number]>;

type DataOf<E> = E extends { readonly schema: infer S }
  ? S extends undefined
    ? unknown
    : SchemaOutput<S>
  : unknown;

/** The event handed to the handler: the message plus its decoded payload. */
export interface InboxEvent<T = unknown> extends InboxMessage {
  /** The payload parsed as JSON (and validated, when the accepted event has a schema). */
  readonly data: T;
}

/**
 * Accepted type and version (unless `released`: an operator let it through once), JSON payload,
 * schema validation. A reason when the message cannot be handled.
 */
export async function decode<T>(
  accepts: readonly AcceptedEvent[] | undefined,
  message: InboxMessage,
  released: () => Promise<boolean>,
): Promise<{ event: InboxEvent<T> } | { reason: string }> {
  const accepted = accepts?.find((a) => a.type === message.type);
  if (accepts !== undefined) {
    const versions = accepted === undefined ? [] : ([] as number[]).concat(accepted.schemaVersion);
    if (!versions.includes(message.schemaVersion) && !(await released())) {
      return {
        reason:
          accepted === undefined
            ? `unknown event type "${message.type}" (schema version ${message.schemaVersion}): add it to accepts to handle it`
            : `schema version ${message.schemaVersion} of "${message.type}" is not accepted (accepts ${versions.join(', ')}): deploy a consumer that understands it, then release`,
      };
    }
  }
  let data: unknown;
  const contentType = message.contentType ?? message.headers['ce-datacontenttype'] ?? 'application/json';
  if (contentType === 'application/json') {
    try {
      data = JSON.parse(Buffer.from(message.payload).toString('utf8'));
    } catch (error) {
      return { reason: `payload is not valid JSON: ${errorMessage(error)}` };
    }
  } else {
    data = message.payload;
  }
  if (accepted?.schema) {
    const result = await accepted.schema['~standard'].validate(data);
    if (result.issues) {
      return {
        reason: `payload of "${message.type}" v${message.schemaVersion} fails validation: ${result.issues
          .map((i) => i.message)
          .join('; ')
          .slice(0, 1000)}`,
      };
    }
    data = result.value;
  }
  return { event: { ...message, data: data as T } };
}
