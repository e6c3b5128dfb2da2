/** The MQTT publisher: one `publish()` call from prepared messages to outcomes, and `close()`. */
import { errorMessage } from '../../errors.js';
import type { OutboxMessage, Publisher, PublishOutcome } from '../contract.js';
import { CallAbort } from '../core/call-abort.js';
import { PublisherLifecycle } from '../core/lifecycle.js';
import { LinkActivity } from '../core/link-activity.js';
import { retryable } from './classify.js';
import { type MqttPublisherOptions, type MqttResolved, resolveMqttOptions } from './options.js';
import { MqttSession } from './session.js';
import { Run, SendWindow } from './window.js';
import { prepareMessage } from './wire.js';

/**
 * A {@link Publisher} for MQTT (name `mqtt`). With `url`, the client is created at the first
 * publish and then reconnects on its own (MQTT.js `reconnectPeriod`, default 1 s); a publisher
 * created while the broker is down starts working as soon as it is back.
 *
 * Outcomes: a message is delivered when the broker's PUBACK (QoS 2: PUBCOMP) says success
 * (`0x10 no matching subscribers` included: MQTT brokers keep nothing for a topic nobody
 * subscribed to). Permanent: a topic that is empty, has a wildcard `+`/`#`, a NUL, a control
 * character or a noncharacter, or is over 65 535 bytes; a header MQTT cannot carry; a packet
 * over the broker's Maximum Packet Size — all decided before sending — and a PUBACK with reason
 * `not authorized`, `topic name invalid` or `payload format invalid` (or `packet too large`).
 * Retryable: any other failure reason, a missing PUBACK within `timeoutMs`, an aborted batch.
 * Broker unavailable (retryable, `BROKER_UNAVAILABLE`, no attempt charged): not connected
 * (publishes fail at once instead of queueing offline; while a connection attempt is under way
 * they wait for it, at most `timeoutMs`), the connection lost before the PUBACK, a broker that
 * refuses the connection or MQTT 5. Except when the broker hung up with a DISCONNECT that blames
 * what was sent (malformed packet, protocol error, not authorized, topic name invalid, packet too
 * large, payload format invalid): then in-flight messages fail as plain retryable, so a message
 * that makes the broker hang up is charged its attempts and ends dead instead of looping forever.
 *
 * Throughput: at most min(`maxInFlight`, the broker's Receive Maximum) PUBLISHes await their PUBACK.
 * On Mosquitto, `set_tcp_nodelay true` removes a ~40 ms stall at the end of every batch (its last
 * PUBACK waits for the client's delayed TCP ACK under Nagle).
 *
 * A message whose PUBACK never came (timeout, lost connection) is removed from MQTT.js's
 * outgoing store, so the client does not resend it on reconnect: the relay republishes it.
 * Consumers dedup on the envelope's `id` either way (MQTT has no broker-side dedup).
 *
 * `close()` is idempotent: unsent messages fail as retryable, messages in flight get their
 * PUBACK or fail within `timeoutMs`, then a client made from `url` is ended. Later publishes
 * reject with an OutboxError `TXO_PUBLISHER_CLOSED`.
 *
 * @example
 * const publisher = mqttPublisher({ url: 'mqtt://127.0.0.1:1883' });
 * @throws OutboxValidationError when an option is invalid (names the option and the fix).
 */
export function mqttPublisher(options: MqttPublisherOptions): Publisher {
  return new MqttPublisher(resolveMqttOptions(options));
}

class MqttPublisher implements Publisher {
  readonly name = 'mqtt';
  readonly #options: MqttResolved;
  readonly #lifecycle = new PublisherLifecycle('MQTT');
  readonly #activity = new LinkActivity();
  readonly #session: MqttSession;
  readonly #window: SendWindow;
  readonly #runs = new Set<Run>();

  constructor(options: MqttResolved) {
    this.#options = options;
    this.#session = new MqttSession(options, this.#lifecycle.closing, this.#activity, {
      connected: (capacity) => this.#window.connected(capacity),
      lost: (outcome) => this.#window.lost(outcome),
    });
    this.#window = new SendWindow(options, this.#session, this.#activity);
    this.#session.follow();
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.#lifecycle.assertOpen();
    const run = new Run(batch.map((message) => prepareMessage(message, this.#options)));
    if (run.done) return run.promise;
    this.#runs.add(run);
    // Only the caller's signal: close() lets messages in flight get their PUBACK (within timeoutMs).
    const abort = new CallAbort({ signal });
    abort.onAbort((_cause, reason) => this.#window.abort(run, reason));
    try {
      const ready = await this.#session.ready(signal);
      if (!run.done) {
        if ('client' in ready) this.#window.start(run, ready.client);
        else
          run.settleRest(
            0,
            () => ready.outcome,
            () => ready.outcome,
          );
      }
    } catch (error) {
      const outcome = retryable(`Publish failed: ${errorMessage(error)}`, error);
      run.settleRest(
        0,
        () => outcome,
        () => outcome,
      );
    }
    try {
      return await run.promise;
    } finally {
      abort.dispose();
      this.#runs.delete(run);
    }
  }

  close(): Promise<void> {
    return this.#lifecycle.close(() => this.#shutdown());
  }

  async #shutdown(): Promise<void> {
    // Closing (the lifecycle's signal) ends connection waits; unsent messages fail at once, sent
    // ones get their PUBACK or fail within timeoutMs.
    this.#window.wake();
    await Promise.allSettled([...this.#runs].map((run) => run.promise));
    this.#window.stop();
    await this.#session.end();
  }
}
