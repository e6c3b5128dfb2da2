/**
 * One confirm channel and what is in flight on it: the messages awaiting their confirm (by
 * message id, for `basic.return`), the write buffer's `drain`, the exchanges checked on it,
 * and what the broker was heard saying (confirms, nacks, returns).
 */
import type { Channel, ConfirmChannel, Message } from 'amqplib';
import type { PublishError } from '../../errors.js';
import { BatchRun } from '../core/batch-run.js';
import type { CallAbort } from '../core/call-abort.js';
import { closeWithin } from '../core/lifecycle.js';
import { LinkActivity } from '../core/link-activity.js';
import { type ChannelError, exchangeRefused, isExchangeRefusal } from './classify.js';
import type { AmqpConnection, Link } from './link.js';
import { frameMaxOf, type Item } from './wire.js';

/** One `publish()` call: its outcomes (settled one by one) and what it handed to the channel. */
export class Run extends BatchRun<Item> {
  /** Messages handed to the channel, in send order. */
  readonly sent: Entry[] = [];
  /** Set when the call was aborted (its signal, or a close that ran out of time). */
  aborted: PublishError | undefined;
}

/** A published message awaiting its confirm. */
export interface Entry {
  readonly run: Run;
  readonly index: number;
  readonly item: Item;
  readonly session: Session;
  /** Its key among the publisher's pending confirms (in send order, so deadline order). */
  readonly token: number;
  /** `performance.now()` past which it fails for want of a confirm. */
  readonly deadline: number;
  /** What was heard from the broker on its channel when it was sent (see LinkActivity). */
  readonly mark: number;
  /** Set when the broker returned the message (unroutable); its confirm follows. */
  returned: Message['fields'] | undefined;
  /** Still counted against maxInFlight. */
  slot: boolean;
  /** The next in-flight message with the same message id (a republish), if any. */
  next: Entry | undefined;
}

export class Session {
  readonly link: Link;
  readonly channel: ConfirmChannel;
  readonly frameMax: number;
  /** In-flight messages by message id (chained when a republish overlaps): for `basic.return`. */
  readonly #byId = new Map<string, Entry>();
  /** Exchanges checked (or declared) on this channel. */
  readonly exchanges = new Set<string>();
  closed = false;
  /** The server's reason when it closed the channel. */
  error: ChannelError | undefined;
  writable = true;
  readonly #drainWaiters = new Set<(drained: boolean) => void>();

  /** Confirms, nacks and returns heard on this channel. */
  readonly activity = new LinkActivity();

  constructor(link: Link, channel: ConfirmChannel) {
    this.link = link;
    this.channel = channel;
    this.frameMax = frameMaxOf(channel.connection);
    channel.on('error', (error: Error) => {
      this.error = error;
      this.closed = true;
    });
    channel.on('close', () => {
      this.closed = true;
      this.#wakeDrainWaiters(false);
    });
    channel.on('drain', () => {
      this.writable = true;
      this.#wakeDrainWaiters(true);
    });
    channel.on('return', (message: Message) => {
      this.activity.heard();
      this.#onReturn(message);
    });
  }

  track(entry: Entry): void {
    const id = entry.item.eventId;
    const head = this.#byId.get(id);
    if (head === undefined) {
      this.#byId.set(id, entry);
      return;
    }
    let tail = head;
    while (tail.next !== undefined) tail = tail.next;
    tail.next = entry;
  }

  untrack(entry: Entry): void {
    const id = entry.item.eventId;
    const head = this.#byId.get(id);
    if (head === entry) {
      if (entry.next === undefined) this.#byId.delete(id);
      else this.#byId.set(id, entry.next);
      return;
    }
    for (let e = head; e !== undefined; e = e.next) {
      if (e.next === entry) {
        e.next = entry.next;
        return;
      }
    }
  }

  /** Resolves true once the channel's write buffer drained; false on close, timeout or abort. */
  waitForDrain(timeoutMs: number, abort: CallAbort): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    return new Promise<boolean>((resolve) => {
      let unsubscribe = (): void => undefined;
      const wake = (drained: boolean): void => {
        if (!this.#drainWaiters.delete(wake)) return;
        clearTimeout(timer);
        unsubscribe();
        resolve(drained);
      };
      const timer = setTimeout(() => wake(false), timeoutMs);
      this.#drainWaiters.add(wake);
      unsubscribe = abort.onAbort(() => wake(false));
    });
  }

  /**
   * Checks (or, with `assert`, declares as durable topic exchanges) each exchange not yet seen
   * on this channel, on a separate short-lived channel: a missing exchange closes the channel it
   * is used on, and this way it never takes the confirm channel (and its messages in flight)
   * with it. Returns the refusals by exchange; a failure of the link itself rejects.
   */
  async checkExchanges(
    names: ReadonlySet<string>,
    assert: boolean,
    timeoutMs: number,
  ): Promise<Map<string, PublishError>> {
    const refused = new Map<string, PublishError>();
    let side: Channel | undefined;
    try {
      for (const name of names) {
        if (name === '' || this.exchanges.has(name)) continue;
        side ??= await openSideChannel(this.link.model);
        try {
          if (assert && !name.startsWith('amq.')) await side.assertExchange(name, 'topic', { durable: true });
          else await side.checkExchange(name);
          this.exchanges.add(name);
        } catch (error) {
          if (!isExchangeRefusal(error)) throw error;
          refused.set(name, exchangeRefused(name, error));
          side = undefined; // the broker closed it
        }
      }
    } finally {
      if (side !== undefined) void closeWithin(side.close(), timeoutMs);
    }
    return refused;
  }

  #wakeDrainWaiters(drained: boolean): void {
    for (const wake of [...this.#drainWaiters]) wake(drained);
  }

  /** Returns come before the confirm of the same message, in publish order. */
  #onReturn(message: Message): void {
    const id: unknown = message.properties.messageId;
    if (typeof id !== 'string') return;
    for (let e = this.#byId.get(id); e !== undefined; e = e.next) {
      if (e.returned === undefined) {
        e.returned = message.fields;
        return;
      }
    }
  }
}

/** A short-lived channel for exchange checks (a refusal closes it, not the confirm channel). */
async function openSideChannel(model: AmqpConnection): Promise<Channel> {
  const channel = await model.createChannel();
  channel.on('error', () => undefined); // refusals arrive as the rejected operation's error
  return channel;
}
