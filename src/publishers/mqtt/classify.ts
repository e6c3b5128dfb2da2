/**
 * The MQTT publisher's verdicts: what a PUBACK reason code, a server DISCONNECT, a refused
 * CONNACK, a lost connection or a missing PUBACK mean for a message (delivered elsewhere; here:
 * permanent, retryable, or broker-unavailable).
 */
import { ReasonCodes } from 'mqtt';
import { BROKER_UNAVAILABLE, errorMessage, PublishError } from '../../errors.js';
import { failed, type PublishOutcome } from '../contract.js';
import { permanent } from '../core/outcomes.js';
import { show } from './topic.js';

/**
 * PUBACK / PUBREC reason codes a retry cannot cure. MQTT 5 does not list 0x95 (packet too large)
 * for PUBACK — brokers send it as a DISCONNECT, see below — but a broker that does gets the same verdict.
 */
const PERMANENT_REASONS: ReadonlySet<number> = new Set([0x87, 0x90, 0x95, 0x99]);
/**
 * Server DISCONNECT reason codes that blame what was sent, not the broker's health: in-flight
 * messages then fail as ordinary retryable failures (charged an attempt), so a message that
 * makes the broker hang up cannot be retried forever for free.
 */
const MESSAGE_FAULT_DISCONNECTS: ReadonlySet<number> = new Set([0x81, 0x82, 0x87, 0x90, 0x95, 0x99]);
/** CONNACK codes of a broker that does not speak the requested protocol version. */
const UNSUPPORTED_VERSION: ReadonlySet<number> = new Set([0x01, 0x84]);

/** A retryable failure: the event is charged an attempt. */
export function retryable(message: string, cause?: unknown): PublishOutcome {
  return failed(new PublishError(message, { retryable: true, cause }), true);
}

/** The broker is not reachable: retryable, `BROKER_UNAVAILABLE`, no attempt charged. */
export function unavailable(message: string, cause?: unknown): PublishOutcome {
  return failed(new PublishError(message, { retryable: true, code: BROKER_UNAVAILABLE, cause }), true);
}

/** `0x87 not authorized`: a reason code as it reads in messages. */
export function reasonName(code: number): string {
  const name = (ReasonCodes as Record<number, string | undefined>)[code];
  return `0x${code.toString(16).padStart(2, '0')}${name ? ` ${name.toLowerCase()}` : ''}`;
}

/** The verdict on a PUBACK (PUBREC, PUBCOMP) carrying a failure reason code. */
export function refusal(code: number, topic: string, cause: unknown): PublishOutcome {
  const message = `The MQTT broker refused the publish to ${show(topic)}: reason ${reasonName(code)}`;
  return PERMANENT_REASONS.has(code) ? permanent(message, cause) : retryable(message, cause);
}

/** The verdict on the error MQTT.js calls a publish back with; `where` names the broker. */
export function ackFailure(error: Error, topic: string, where: string): PublishOutcome {
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'number' && code >= 0x80) return refusal(code, topic, error);
  // 'Connection closed', 'client disconnecting' …: the client gave up on the message.
  return unavailable(`Publish to ${show(topic)} failed: ${errorMessage(error)} (${where})`, error);
}

/**
 * The verdict on the publishes awaiting their PUBACK when the connection closed: broker
 * unavailable, unless the server's DISCONNECT (`reason`) blamed what was sent (then retryable).
 */
export function connectionLost(
  where: string,
  reason: number | undefined,
  lastError: Error | undefined,
): (topic: string) => PublishOutcome {
  const blamed = reason !== undefined && MESSAGE_FAULT_DISCONNECTS.has(reason);
  return (topic) => {
    const message =
      `Publish to ${show(topic)} lost its PUBACK: the connection to the MQTT broker (${where}) closed` +
      (reason === undefined ? '' : ` (server DISCONNECT, reason ${reasonName(reason)})`);
    return blamed ? retryable(message) : unavailable(message, lastError);
  };
}

/** Why there is no connection (the client's last error, if any), as every message's broker-unavailable outcome. */
export function notConnected(
  where: string,
  protocolVersion: 4 | 5,
  error: Error | undefined,
): PublishOutcome {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (protocolVersion === 5 && typeof code === 'number' && UNSUPPORTED_VERSION.has(code)) {
    return unavailable(
      `The MQTT broker (${where}) refuses MQTT 5 (${errorMessage(error)}). The envelope travels in MQTT 5 ` +
        'user properties; publish with protocolVersion: 4 (CloudEvents structured JSON payloads) or upgrade the broker',
      error,
    );
  }
  const detail = error === undefined ? 'not connected' : errorMessage(error);
  return unavailable(`The MQTT broker is not available (${where}): ${detail}`, error);
}

/**
 * No PUBACK within `timeoutMs`. A broker silent since the publish (`silent`) leaves the link in
 * doubt: its fault, not the event's (broker-unavailable); otherwise retryable.
 */
export function ackTimeout(timeoutMs: number, topic: string, silent: boolean): PublishOutcome {
  const late = `Timed out after ${timeoutMs} ms waiting for the PUBACK of ${show(topic)}`;
  return silent
    ? unavailable(`${late}; nothing heard from the broker since it was sent: the connection is in doubt`)
    : retryable(late);
}
