/**
 * Reading the pipeline's replies: which message a reply subject names (a base-36 token after
 * the inbox prefix), and the outcome a PubAck (or an API error in its place) gives. A successful
 * PubAck (`{"stream":…,"seq":…}`) is recognised without JSON.parse; only replies that mention
 * `"error"` (or look unusual) are parsed.
 */
import type { Msg } from '@nats-io/transport-node';
import { errorMessage, PublishError } from '../../errors.js';
import { DELIVERED, failed, type PublishOutcome } from '../contract.js';
import { apiRefusal } from './classify.js';

/** The reply subject of the message with `token`: `<inbox>.<token in base 36>`. */
export function replySubject(prefix: string, token: number): string {
  return prefix + token.toString(36);
}

/** The base-36 token after the reply prefix (`from` characters long); -1 when it is not one of ours. */
export function replyToken(subject: string, from: number): number {
  let token = 0;
  if (from >= subject.length) return -1;
  for (let i = from; i < subject.length; i += 1) {
    const c = subject.charCodeAt(i);
    if (c >= 48 && c <= 57) token = token * 36 + (c - 48);
    else if (c >= 97 && c <= 122) token = token * 36 + (c - 87);
    else return -1;
  }
  return token;
}

/** The outcome of the publish to `subject` that got `msg` as its reply (not a 503: see the pipeline). */
export function pubAckOutcome(msg: Pick<Msg, 'data' | 'headers'>, subject: string): PublishOutcome {
  const data = msg.data;
  if (data.length === 0) {
    const status = msg.headers;
    return failed(
      new PublishError(`Publish to "${subject}" got an empty reply (${status?.status ?? 'no status'})`, {
        retryable: true,
      }),
      true,
    );
  }
  // A PubAck is `{"stream":"NAME","seq":N}` (plus `"duplicate":true`): no need to parse it.
  if (isPlainPubAck(data)) return DELIVERED;
  let reply: { stream?: unknown; error?: { code?: number; err_code?: number; description?: string } };
  try {
    reply = JSON.parse(decoder.decode(data)) as typeof reply;
  } catch (error) {
    return failed(
      new PublishError(`Publish to "${subject}" got a reply that is not a PubAck: ${errorMessage(error)}`, {
        retryable: true,
        cause: error,
      }),
      true,
    );
  }
  if (reply.error !== undefined && reply.error !== null) {
    const { err_code: errCode, code, description } = reply.error;
    const refusal = apiRefusal(subject, errCode, description ?? `error ${code ?? errCode ?? 'unknown'}`);
    return failed(refusal, refusal.retryable);
  }
  if (typeof reply.stream === 'string' && reply.stream !== '') return DELIVERED;
  return failed(
    new PublishError(`Publish to "${subject}" got a reply that is not a PubAck`, { retryable: true }),
    true,
  );
}

const decoder = new TextDecoder();
const PUBACK_PREFIX = new TextEncoder().encode('{"stream":');
/** `"error"` */
const ERROR_KEY = new TextEncoder().encode('"error"');

/** `{"stream":…` without an `"error"` key anywhere. */
function isPlainPubAck(data: Uint8Array): boolean {
  if (data.length < PUBACK_PREFIX.length) return false;
  for (let i = 0; i < PUBACK_PREFIX.length; i += 1) if (data[i] !== PUBACK_PREFIX[i]) return false;
  const last = data.length - ERROR_KEY.length;
  // From quote to quote (a native search): a PubAck has a few.
  for (
    let i = data.indexOf(0x22, PUBACK_PREFIX.length);
    i !== -1 && i <= last;
    i = data.indexOf(0x22, i + 1)
  ) {
    let k = 1;
    while (k < ERROR_KEY.length && data[i + k] === ERROR_KEY[k]) k += 1;
    if (k === ERROR_KEY.length) return false;
  }
  return true;
}
