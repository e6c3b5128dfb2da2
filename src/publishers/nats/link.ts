/**
 * Is the connection to NATS alive? Asked when a PubAck is overdue: a timeout on a link that
 * still carries traffic is the message's (or the stream's) trouble and costs the event an
 * attempt; a timeout on a link that went silent (a network stall, a half-open TCP connection
 * the client has not noticed yet: its own pings come every two minutes) is the broker being
 * unreachable, and must not burn the event's attempts.
 *
 * The evidence is a PING sent now and answered within the probe deadline: NATS keeps a
 * connection's traffic in order, so its PONG says the server reads what we send. Messages
 * received since the publish are no evidence: a stall that begins while PubAcks of earlier
 * messages are on their way (or that holds only our direction) still lets them in. One probe
 * is shared by every publish that asks while it is under way.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { raceDeadline } from '../core/deadline.js';

/** Longest wait for the PONG of a probe, in ms (shorter when the publish timeout is). */
const MAX_PROBE_MS = 5_000;

/**
 * One yes-or-no question to the server, asked by every publish that wants the answer while it is
 * under way: at most one in flight per connection, never an error (no answer in time is `false`).
 */
abstract class SharedProbe {
  protected readonly nc: NatsConnection;
  /** How long a probe may wait for its answer. */
  readonly probeMs: number;
  #probe: Promise<boolean> | undefined;

  constructor(nc: NatsConnection, timeoutMs: number) {
    this.nc = nc;
    this.probeMs = Math.min(timeoutMs, MAX_PROBE_MS);
  }

  protected ask(): Promise<boolean> {
    if (this.nc.isClosed()) return Promise.resolve(false);
    this.#probe ??= this.question()
      .catch(() => false)
      .finally(() => {
        this.#probe = undefined;
      });
    return this.#probe;
  }

  protected abstract question(): Promise<boolean>;
}

export class LinkProbe extends SharedProbe {
  /** True when the server answers a ping within the probe deadline. */
  alive(): Promise<boolean> {
    return this.ask();
  }

  protected question(): Promise<boolean> {
    return raceDeadline(this.nc.flush(), this.probeMs).then(() => true);
  }
}

/**
 * Does JetStream answer on this connection? Asked when a publish got 503 "no responders": with
 * JetStream answering, no stream captures the subject, which is the event's (or the
 * configuration's) failure and costs an attempt, so it goes dead after maxAttempts instead of
 * holding the relay in outage backoff forever; with JetStream silent (disabled, not enabled
 * for the account, or the server still starting) the broker is unavailable. One request to
 * `$JS.API.INFO` is shared by every publish that asks while it is under way.
 */
export class JetStreamProbe extends SharedProbe {
  /** True when JetStream answered its account info request without an error. */
  up(): Promise<boolean> {
    return this.ask();
  }

  protected async question(): Promise<boolean> {
    const reply = await this.nc.request('$JS.API.INFO', undefined, { timeout: this.probeMs });
    if (reply.data.length === 0) return false;
    try {
      const info = JSON.parse(decoder.decode(reply.data)) as { error?: unknown };
      return info.error === undefined || info.error === null;
    } catch {
      return false;
    }
  }
}

const decoder = new TextDecoder();
