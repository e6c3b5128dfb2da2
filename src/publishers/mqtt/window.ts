/**
 * The MQTT publisher's send window: runs (publish calls) waiting for room, first come first
 * served; the PUBLISHes awaiting their PUBACK, each with its deadline (one DeadlineSweep timer);
 * and what a PUBACK, a timeout, an abort or a lost connection settles.
 */
import type { MqttClient } from 'mqtt';
import { DELIVERED, type PublishOutcome } from '../contract.js';
import { abortError } from '../core/abort-error.js';
import { BatchRun } from '../core/batch-run.js';
import { DeadlineSweep } from '../core/deadline-sweep.js';
import type { LinkActivity } from '../core/link-activity.js';
import { permanent } from '../core/outcomes.js';
import { ackFailure, ackTimeout, retryable } from './classify.js';
import { show } from './topic.js';
import { isPrepared, maxPacketBytes, type Prepared, packetBytes } from './wire.js';

/** What the window asks of the connection before sending. */
export interface SendGate {
  /** True when waiting runs must give up: the publisher closed, or the connection is gone. */
  stopped(): boolean;
  /** Undefined when `client` (the one a run was started on) takes PUBLISHes now; else what its unsent messages get. */
  blocked(client: MqttClient): PublishOutcome | undefined;
  /** The broker, as it reads in error messages. */
  where(): string;
}

/** One `publish()` call, and where it is sent. */
export class Run extends BatchRun<Prepared> {
  /** The connected client it sends on, once there is one. */
  client: MqttClient | undefined;
  /** Largest PUBLISH the broker accepts, in bytes. */
  maxPacket = Number.POSITIVE_INFINITY;
}

/** A PUBLISH awaiting its PUBACK. */
interface Pending {
  readonly run: Run;
  readonly index: number;
  readonly topic: string;
  readonly deadline: number;
  /** What was heard from the broker when it was sent (see LinkActivity). */
  readonly mark: number;
  readonly client: MqttClient;
  /** MQTT packet identifier, or -1 when MQTT.js queued the publish (id not known yet). */
  messageId: number;
}

export class SendWindow {
  readonly #timeoutMs: number;
  readonly #gate: SendGate;
  /** Every packet the broker sends counts: PUBACKs, PINGRESPs … */
  readonly #activity: LinkActivity;
  /** Our publishes awaiting their PUBACK, by token, in send order (= deadline order). */
  readonly #pending = new Map<number, Pending>();
  /** Fails the publishes past their deadline (no PUBACK within timeoutMs). */
  readonly #sweep = new DeadlineSweep(
    this.#pending,
    (p) => {
      p.run.settle(p.index, ackTimeout(this.#timeoutMs, p.topic, this.#activity.silentSince(p.mark)));
      forget(p);
    },
    () => this.#released(),
  );
  #counter = 0;
  /** Runs with messages left to send, waiting for room, first come first served. */
  readonly #waiting: Run[] = [];
  /** True while {@link wake} sends: a slot freed meanwhile is used by its loop, not by a nested one. */
  #pumping = false;
  /** maxInFlight, lowered to the broker's Receive Maximum. */
  #capacity: number;

  constructor(
    options: { readonly timeoutMs: number; readonly maxInFlight: number },
    gate: SendGate,
    activity: LinkActivity,
  ) {
    this.#timeoutMs = options.timeoutMs;
    this.#capacity = options.maxInFlight;
    this.#gate = gate;
    this.#activity = activity;
  }

  /** Connected: the window is `capacity` wide; waiting runs send. */
  connected(capacity: number): void {
    this.#capacity = capacity;
    this.wake();
  }

  /** The connection closed: every pending publish fails with `outcome(topic)`; waiting runs give up. */
  lost(outcome: (topic: string) => PublishOutcome): void {
    this.#failPending(outcome);
    this.wake();
  }

  /** Queues the run for sending on `client` and sends what fits. */
  start(run: Run, client: MqttClient): void {
    run.client = client;
    run.maxPacket = maxPacketBytes(client);
    this.#waiting.push(run);
    this.wake();
  }

  /**
   * Lets waiting runs send, oldest first, while there is room. It runs synchronously, also from
   * inside a PUBACK callback: the freed slot is refilled at once, as a hand-written MQTT.js loop
   * would, instead of after a promise hop (MQTT.js handles each incoming packet in its own
   * `process.nextTick`, so promise continuations would only run once a whole burst of PUBACKs
   * was handled, draining the window each time).
   */
  wake(): void {
    if (this.#pumping) return;
    this.#pumping = true;
    try {
      while (this.#waiting.length > 0 && (this.#pending.size < this.#capacity || this.#gate.stopped())) {
        this.#pump(this.#waiting.shift()!);
      }
    } finally {
      this.#pumping = false;
    }
  }

  /** The batch's signal aborted: its open messages fail now (their slots free on PUBACK or timeout). */
  abort(run: Run, reason: unknown): void {
    const at = this.#waiting.indexOf(run);
    if (at >= 0) this.#waiting.splice(at, 1);
    const cause = abortError(reason);
    run.settleRest(
      0,
      ({ topic }) => retryable(`Publish to ${show(topic)} aborted before its PUBACK arrived`, cause),
      ({ topic }) => retryable(`Publish to ${show(topic)} was cancelled before sending`, cause),
    );
  }

  /** Stops the deadline timer (on close, once every run settled). */
  stop(): void {
    this.#sweep.stop();
  }

  /** Sends the run's messages in batch order until it is done or the window is full (then it waits again). */
  #pump(run: Run): void {
    const client = run.client!;
    if (run.done || this.#cannotSend(run, client)) return;
    const { items } = run;
    const now = performance.now();
    while (run.next < items.length && !run.done) {
      const i = run.next;
      const item = items[i]!;
      if (!isPrepared(item) || run.outcomes[i] !== undefined) {
        run.next = i + 1;
        continue;
      }
      if (item.maxBytes > run.maxPacket) {
        const bytes = packetBytes(item);
        if (bytes > run.maxPacket) {
          run.next = i + 1;
          run.settle(
            i,
            permanent(
              `The PUBLISH to ${show(item.topic)} would be ${bytes} bytes; the MQTT broker accepts at most ${run.maxPacket}`,
            ),
          );
          continue;
        }
      }
      if (this.#pending.size >= this.#capacity) {
        this.#waiting.push(run);
        return;
      }
      run.next = i + 1;
      this.#send(run, i, item, client, now);
    }
  }

  /** When closed or disconnected, settles the run's unsent items and says so. */
  #cannotSend(run: Run, client: MqttClient): boolean {
    const outcome = this.#gate.blocked(client);
    if (outcome === undefined) return false;
    // Items already sent are settled by their PUBACK, their timeout or the lost connection.
    run.settleRest(
      run.next,
      () => outcome,
      () => outcome,
    );
    return true;
  }

  #send(run: Run, index: number, item: Prepared, client: MqttClient, now: number): void {
    const token = this.#counter;
    this.#counter = token >= 0x3fffffff ? 0 : token + 1;
    const entry: Pending = {
      run,
      index,
      topic: item.topic,
      deadline: now + this.#timeoutMs,
      mark: this.#activity.mark(),
      client,
      messageId: -1,
    };
    this.#pending.set(token, entry);
    // MQTT.js calls back with `null` (or nothing) on success.
    const callback = (error?: Error | null): void => this.#onAck(token, error ?? undefined);
    client.publish(item.topic, item.payload, item.options, callback);
    if (this.#pending.get(token) === entry) {
      // Sent at once (not queued behind the client's store replay): remember its packet id.
      const id = client.getLastMessageId();
      if (client.outgoing[id]?.cb === callback) entry.messageId = id;
    }
    this.#sweep.added(this.#timeoutMs);
  }

  #onAck(token: number, error: Error | undefined): void {
    const pending = this.#pending.get(token);
    if (pending === undefined) return; // late: it timed out or the connection dropped meanwhile
    this.#pending.delete(token);
    pending.run.settle(
      pending.index,
      error === undefined ? DELIVERED : ackFailure(error, pending.topic, this.#gate.where()),
    );
    this.#released();
  }

  /** A slot came free: a waiting run fills it. */
  #released(): void {
    if (this.#waiting.length > 0) this.wake();
  }

  /** Fails every pending publish and drops it from the client's outgoing store. */
  #failPending(outcome: (topic: string) => PublishOutcome): void {
    if (this.#pending.size === 0) return;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) {
      p.run.settle(p.index, outcome(p.topic));
      forget(p);
    }
    this.#released();
  }
}

/** Drops a publish we gave up on from MQTT.js's outgoing store, so it is not resent on reconnect. */
function forget(pending: Pending): void {
  const { client, messageId } = pending;
  if (messageId >= 0 && client.outgoing[messageId] !== undefined) client.removeOutgoingMessage(messageId);
}
