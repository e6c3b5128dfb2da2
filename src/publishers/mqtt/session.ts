/**
 * The MQTT publisher's connection: the client (made from `url` at the first publish, or given),
 * the events it follows, whether a connection attempt is under way, why the broker is not
 * available, and ending (or letting go of) the client on close.
 */
import { connect, type MqttClient, type MqttClientEventCallbacks } from 'mqtt';
import { errorMessage } from '../../errors.js';
import { redactUrl } from '../../redact.js';
import type { PublishOutcome } from '../contract.js';
import { CallAbort } from '../core/call-abort.js';
import { closeWithin } from '../core/lifecycle.js';
import type { LinkActivity } from '../core/link-activity.js';
import { connectionLost, notConnected, retryable, unavailable } from './classify.js';
import type { MqttResolved } from './options.js';
import type { SendGate } from './window.js';
import { inFlightCapacity } from './wire.js';

/** What the session tells the send window. */
export interface SessionEvents {
  /** Connected: at most `capacity` publishes may await their PUBACK. */
  connected(capacity: number): void;
  /** The connection closed: every publish awaiting its PUBACK gets `outcome(topic)`. */
  lost(outcome: (topic: string) => PublishOutcome): void;
}

/** The connected client a batch is sent on, or the outcome of every message of the batch. */
export type Ready = { readonly client: MqttClient } | { readonly outcome: PublishOutcome };

/** The client events the session follows (in this order), kept to detach them from a client it does not own. */
const FOLLOWED = ['connect', 'close', 'reconnect', 'error', 'disconnect', 'packetreceive'] as const;
type Listeners = { readonly [E in (typeof FOLLOWED)[number]]: MqttClientEventCallbacks[E] };

export class MqttSession implements SendGate {
  readonly #options: MqttResolved;
  readonly #closing: AbortSignal;
  readonly #activity: LinkActivity;
  readonly #events: SessionEvents;
  readonly #owned: boolean;
  #client: MqttClient | undefined;
  #listeners: Listeners | undefined;
  /** True while a connection attempt is under way: publishes wait for it instead of failing. */
  #attempting = false;
  #lastError: Error | undefined;
  /** Reason code of the server's DISCONNECT on the current connection, if it sent one. */
  #serverDisconnect: number | undefined;
  /** Publishes waiting for a connection attempt to end. */
  readonly #attemptWaiters = new Set<() => void>();

  /** `closing`: the publisher's ({@link PublisherLifecycle.closing}); `activity` hears every packet the broker sends. */
  constructor(options: MqttResolved, closing: AbortSignal, activity: LinkActivity, events: SessionEvents) {
    this.#options = options;
    this.#closing = closing;
    this.#activity = activity;
    this.#events = events;
    this.#owned = options.client === undefined;
  }

  /** Follows the client given in the options, if any (a client made from `url` waits for the first publish). */
  follow(): void {
    if (this.#options.client !== undefined) this.#attach(this.#options.client);
  }

  /** The connected client, or the outcome every message of the batch gets when there is none. */
  async ready(signal: AbortSignal): Promise<Ready> {
    let client: MqttClient;
    try {
      client = this.#client ?? this.#connect();
    } catch (error) {
      return {
        outcome: unavailable(
          `Cannot create the MQTT client for ${this.where()}: ${errorMessage(error)}`,
          error,
        ),
      };
    }
    if (!client.connected && this.#attempting && !this.#closing.aborted && !signal.aborted) {
      await this.#attemptEnded(signal);
    }
    if (this.#closing.aborted) {
      return { outcome: retryable('The MQTT publisher was closed before the batch was sent') };
    }
    if (client.connected && !client.disconnecting) return { client };
    return { outcome: this.unavailable() };
  }

  stopped(): boolean {
    const client = this.#client;
    return this.#closing.aborted || client === undefined || !client.connected || client.disconnecting;
  }

  blocked(client: MqttClient): PublishOutcome | undefined {
    const closed = this.#closing.aborted;
    if (!closed && client === this.#client && client.connected && !client.disconnecting) return undefined;
    return closed
      ? retryable('The MQTT publisher was closed before this message was sent')
      : this.unavailable();
  }

  /** Why there is no connection, as the broker-unavailable outcome of every message. */
  unavailable(): PublishOutcome {
    return notConnected(this.where(), this.#options.protocolVersion, this.#lastError);
  }

  where(): string {
    const { url } = this.#options;
    return url === undefined ? 'the given client' : redactUrl(url);
  }

  /** Ends a client made from `url` (DISCONNECT within timeoutMs); lets go of a given one, still connected. */
  async end(): Promise<void> {
    const client = this.#client;
    if (client === undefined) return;
    if (this.#owned) await endClient(client, this.#options.timeoutMs);
    else this.#detach(client);
  }

  /** Waits for the connection attempt under way to end, at most `timeoutMs`, or until the call aborts or the publisher closes. */
  async #attemptEnded(signal: AbortSignal): Promise<void> {
    const wait = new CallAbort({ signal, closing: this.#closing, timeoutMs: this.#options.timeoutMs });
    let done = (): void => undefined;
    await new Promise<void>((resolve) => {
      done = resolve;
      this.#attemptWaiters.add(resolve);
      wait.onAbort(() => resolve());
    });
    this.#attemptWaiters.delete(done);
    wait.dispose();
  }

  #connect(): MqttClient {
    const { url, clientOptions, protocolVersion, timeoutMs } = this.#options;
    const client = connect(url!, {
      connectTimeout: timeoutMs,
      reconnectPeriod: 1000,
      reconnectOnConnackError: true,
      queueQoSZero: false,
      resubscribe: false,
      ...clientOptions,
      protocolVersion,
    });
    this.#attach(client);
    this.#attempting = true;
    return client;
  }

  #attach(client: MqttClient): void {
    this.#client = client;
    this.#attempting = !client.connected && !client.disconnecting;
    if (client.connected) this.#connected();
    const listeners: Listeners = {
      connect: () => this.#connected(),
      close: () => this.#connectionClosed(),
      reconnect: () => {
        this.#attempting = true;
      },
      // Errors are kept for the outcomes they explain; MQTT.js reconnects on its own.
      error: (error) => {
        this.#lastError = error;
      },
      disconnect: (packet) => {
        this.#serverDisconnect = packet.reasonCode ?? 0;
      },
      packetreceive: () => this.#activity.heard(),
    };
    this.#listeners = listeners;
    for (const event of FOLLOWED) client.on(event, listeners[event]);
  }

  #detach(client: MqttClient): void {
    const listeners = this.#listeners;
    if (listeners === undefined) return;
    for (const event of FOLLOWED) client.off(event, listeners[event]);
  }

  #connected(): void {
    const client = this.#client!;
    this.#attempting = false;
    this.#lastError = undefined;
    this.#serverDisconnect = undefined;
    const capacity = inFlightCapacity(this.#options.maxInFlight, client);
    this.#notifyAttemptEnded();
    this.#events.connected(capacity);
  }

  /**
   * The connection is gone: every publish awaiting its PUBACK fails now (and is dropped from
   * MQTT.js's store so the client does not resend it after reconnecting: the relay will).
   */
  #connectionClosed(): void {
    this.#attempting = false;
    this.#events.lost(connectionLost(this.where(), this.#serverDisconnect, this.#lastError));
    this.#notifyAttemptEnded();
  }

  #notifyAttemptEnded(): void {
    for (const done of [...this.#attemptWaiters]) done();
  }
}

/** Ends a client this publisher made: DISCONNECT when connected (bounded by timeoutMs), else at once. */
async function endClient(client: MqttClient, timeoutMs: number): Promise<void> {
  if (client.connected) {
    const ended = new Promise<void>((resolve) => client.end(false, () => resolve()));
    if (await closeWithin(ended, timeoutMs)) return;
    // Still waiting for packets that are not ours: the client is already ending (no reconnect).
    client.stream?.destroy();
    return;
  }
  await new Promise<void>((resolve) => {
    client.end(true, () => resolve());
  });
}
