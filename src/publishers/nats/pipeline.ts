/**
 * The lean JetStream publish path. `js.publish()` of the official client makes a request
 * per message (a promise, a timer, a muxed-inbox entry and a JSON parse each) and costs
 * ~130 µs of client CPU per acknowledged message; this pipeline speaks the same protocol
 * with a fraction of that:
 *
 * - every message is a core NATS publish with a reply subject `<inbox>.<token>`, carrying
 *   its `Nats-Msg-Id` (and `Nats-Expected-Stream`) in a header block encoded once;
 * - ONE wildcard subscription `<inbox>.*` receives every PubAck; a Map finds the waiting
 *   message by its token;
 * - a successful PubAck (`{"stream":…,"seq":…}`) is recognised without JSON.parse; only
 *   replies that mention `"error"` (or look unusual) are parsed;
 * - there is no timer per message: every publish has the same deadline offset, so the Map's
 *   insertion order is deadline order and one timer, armed for the oldest entry, expires them;
 * - a batch is one promise, settled when its last message is; at most `maxInFlight`
 *   messages await their PubAck (a slot each, handed to the waiting batches in turn);
 * - a PubAck overdue on a link that went silent fails as the broker's fault, not the
 *   message's (see link.ts).
 */
import {
  createInbox,
  type Msg,
  MsgHdrsImpl,
  type NatsConnection,
  type PublishOptions,
  type Subscription,
} from '@nats-io/transport-node';
import { errorMessage, PublishError } from '../../errors.js';
import { failed, type PublishOutcome } from '../contract.js';
import { abortError } from '../core/abort-error.js';
import { BatchRun, isOutcome } from '../core/batch-run.js';
import type { CallAbort } from '../core/call-abort.js';
import { DeadlineSweep } from '../core/deadline-sweep.js';
import { acquireSlot, Slots } from '../core/slots.js';
import {
  abortedBeforeAck,
  cancelledBeforeSend,
  classify,
  connectionLost,
  linkInDoubt,
  noResponders,
  noStreamCaptures,
  timedOut,
} from './classify.js';
import { HpubWriter } from './hpub-writer.js';
import { JetStreamProbe, LinkProbe } from './link.js';
import { pubAckOutcome, replySubject, replyToken } from './puback.js';
import type { PipelineItem } from './wire.js';

export interface PipelineOptions {
  /** Deadline of each PubAck, in ms. */
  readonly timeoutMs: number;
  /** Upper bound of publishes awaiting their PubAck, across concurrent batches. */
  readonly maxInFlight: number;
  /** Called when a 503 (no responders) comes back: the stream may have vanished. */
  readonly onNoResponders?: () => void;
}

/**
 * A header object whose encoding is the pre-encoded block of the message being sent. The
 * client only calls `encode()`, synchronously inside `publish()`, so one instance serves
 * every message of a pipeline.
 */
class EncodedHeaders extends MsgHdrsImpl {
  bytes: Uint8Array = new Uint8Array(0);

  override encode(): Uint8Array {
    return this.bytes;
  }
}

/** One `publish()` call. */
type Run = BatchRun<PipelineItem>;

interface Pending {
  readonly run: Run;
  readonly index: number;
  readonly subject: string;
  readonly deadline: number;
  /** Its reply token (a late PubAck still finds it while the link is probed). */
  readonly token: number;
}

/** The PubAck pipeline of one connection. */
export class AckPipeline {
  readonly #nc: NatsConnection;
  readonly #timeoutMs: number;
  /** A slot per publish awaiting its PubAck (held while it is in #pending). */
  readonly #slots: Slots;
  readonly #onNoResponders: () => void;
  readonly #headers = new EncodedHeaders();
  readonly #publishOptions: PublishOptions = { headers: this.#headers, reply: '' };
  /** Writes the publishes as protocol bytes, in 64 KB socket writes. */
  readonly #writer: HpubWriter;
  /** token → message awaiting its PubAck, in send order (= deadline order). */
  readonly #pending = new Map<number, Pending>();
  /** Fails the publishes past their deadline (no PubAck within timeoutMs). */
  readonly #sweep = new DeadlineSweep(
    this.#pending,
    (p) => this.#overdue(p),
    () => this.#released(),
  );
  /** Tells an overdue PubAck on a live link (charged) from one on a silent link (unavailable). */
  readonly #probe: LinkProbe;
  /** Tells a subject no stream captures (charged) from JetStream not answering (unavailable). */
  readonly #jetStream: JetStreamProbe;
  /** token → publish past its deadline (or refused 503), waiting for a probe's verdict. */
  readonly #probing = new Map<number, Pending>();
  #sub!: Subscription;
  /** `<inbox>.`: the reply subjects' common prefix. */
  #replyPrefix = '';
  #counter = 0;
  /** Between a disconnect and the next reconnect: nothing is sent. */
  #down = false;
  #closed = false;
  #idle: (() => void) | undefined;

  constructor(nc: NatsConnection, options: PipelineOptions) {
    this.#nc = nc;
    this.#timeoutMs = options.timeoutMs;
    this.#slots = new Slots(options.maxInFlight);
    this.#onNoResponders = options.onNoResponders ?? (() => undefined);
    this.#writer = new HpubWriter(nc);
    this.#probe = new LinkProbe(nc, options.timeoutMs);
    this.#jetStream = new JetStreamProbe(nc, options.timeoutMs);
    this.#subscribe();
  }

  /**
   * Publishes the items concurrently (outcomes pass through); one outcome per entry, in order.
   * When `abort` fires, the open messages fail at once.
   */
  publish(items: readonly (PipelineItem | PublishOutcome)[], abort: CallAbort): Promise<PublishOutcome[]> {
    const run: Run = new BatchRun(items);
    const unsubscribe = abort.onAbort((_cause, reason) => this.#stop(run, reason));
    if (abort.cause !== undefined) return run.promise;
    void this.#sendAll(run, abort).catch((error: unknown) => {
      const failure = failed(
        new PublishError(`Publish failed: ${errorMessage(error)}`, { retryable: true, cause: error }),
        true,
      );
      run.settleRest(
        0,
        () => failure,
        () => failure,
      );
    });
    return run.promise.finally(unsubscribe);
  }

  /** The connection dropped: every pending publish fails now, as the broker's fault. */
  disconnected(cause?: unknown): void {
    this.#down = true;
    this.#writer.disconnected();
    this.#failPending((subject) => failed(connectionLost(subject, cause), true));
    for (const p of this.#probing.values())
      p.run.settle(p.index, failed(connectionLost(p.subject, cause), true));
    this.#probing.clear();
    this.#slots.cancelWaits();
    // The probes' verdicts are dropped now: close() may be waiting for these publishes only.
    this.#released();
  }

  /** The client reconnected (and re-sent its subscriptions); sending resumes. */
  reconnected(): void {
    this.#down = false;
    // The client re-subscribes on reconnect; a subscription the server closed (permissions)
    // is made again.
    if (this.#sub.isClosed() && !this.#nc.isClosed()) this.#subscribe();
  }

  /**
   * Stops sending (waiting runs get retryable outcomes), waits until every publish sent is
   * acknowledged or timed out (within timeoutMs), then drops the reply subscription.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.#slots.close();
    if (this.#pending.size > 0 || this.#probing.size > 0) {
      await new Promise<void>((resolve) => {
        this.#idle = resolve;
      });
    }
    this.#sweep.stop();
    if (!this.#nc.isClosed() && !this.#sub.isClosed()) this.#sub.unsubscribe();
  }

  #subscribe(): void {
    const inbox = createInbox((this.#nc as { options?: { inboxPrefix?: string } }).options?.inboxPrefix);
    this.#replyPrefix = `${inbox}.`;
    this.#sub = this.#nc.subscribe(`${inbox}.*`, { callback: this.#onReply });
  }

  async #sendAll(run: Run, abort: CallAbort): Promise<void> {
    try {
      await this.#sendEach(run, abort);
    } finally {
      this.#writer.flush();
    }
  }

  /** Writes the run's items in turn, each once it has a slot; the caller flushes the last. */
  async #sendEach(run: Run, abort: CallAbort): Promise<void> {
    const { items } = run;
    let now = performance.now();
    if (this.#cannotSend(run, 0, false)) return;
    for (let i = 0; i < items.length; i += 1) {
      if (run.done) return;
      const item = items[i]!;
      if (isOutcome(item)) continue;
      if (!this.#slots.tryAcquire()) {
        // What is written goes out before waiting: its PubAcks are what free the slots.
        this.#writer.flush();
        // Waits its turn for a slot; none while closed or disconnected.
        const granted = !this.#closed && !this.#down && (await acquireSlot(this.#slots, abort));
        if (run.done) {
          if (granted) this.#slots.release(); // pass the slot on
          return;
        }
        if (this.#cannotSend(run, i, granted)) return;
        if (!granted) {
          i -= 1; // a wait ended by a disconnect that is over already: wait again
          continue;
        }
        now = performance.now();
      }
      run.next = i + 1;
      this.#send(run, i, item, now);
    }
  }

  /**
   * When closed or disconnected, settles the run's unsent items from `from` on (freeing the slot
   * it `holds`) and says so.
   */
  #cannotSend(run: Run, from: number, holds: boolean): boolean {
    if (!this.#closed && !this.#down && !this.#nc.isClosed()) return false;
    if (holds) this.#slots.release();
    const closed = this.#closed;
    // Items already sent are settled by their PubAck, their timeout or the disconnect.
    run.settleRest(
      from,
      ({ subject }) => failed(connectionLost(subject), true),
      ({ subject }) => failed(closed ? cancelledBeforeSend(subject) : connectionLost(subject), true),
    );
    return true;
  }

  #send(run: Run, index: number, item: PipelineItem, now: number): void {
    const token = this.#counter;
    this.#counter = token >= 0x3fffffff ? 0 : token + 1;
    const reply = replySubject(this.#replyPrefix, token);
    try {
      if (!this.#writer.write(token, item.subject, reply, item.headers, item.payload)) {
        // The client's own path, and its own error when it refuses (max_payload, closed …).
        this.#writer.flush();
        this.#headers.bytes = item.headers;
        this.#publishOptions.reply = reply;
        this.#nc.publish(item.subject, item.payload, this.#publishOptions);
      }
    } catch (error) {
      // Refused by the client before sending: max_payload with headers, closed connection …
      this.#slots.release();
      const verdict = classify(error, item.subject, this.#timeoutMs);
      run.settle(index, failed(verdict, verdict.retryable));
      return;
    }
    this.#pending.set(token, {
      run,
      index,
      subject: item.subject,
      deadline: now + this.#timeoutMs,
      token,
    });
    this.#sweep.added(this.#timeoutMs);
  }

  /**
   * The call was aborted: its open messages fail now (their slots free on ack or timeout; a wait
   * for one ends by the same abort).
   */
  #stop(run: Run, reason: unknown): void {
    const cause = abortError(reason);
    run.settleRest(
      0,
      ({ subject }) => failed(abortedBeforeAck(subject, cause), true),
      ({ subject }) => failed(cancelledBeforeSend(subject), true),
    );
  }

  #onReply = (error: Error | null, msg: Msg): void => {
    if (error !== null) {
      // The server closed the subscription (e.g. a permissions error): nothing can be acknowledged.
      this.#failPending((subject) => failed(classify(error, subject, this.#timeoutMs), true));
      return;
    }
    const token = replyToken(msg.subject, this.#replyPrefix.length);
    const pending = this.#pending.get(token);
    if (pending === undefined) {
      // Overdue, the link being probed: its PubAck is its outcome (a stall just ended).
      const probed = this.#probing.get(token);
      if (probed === undefined || msg.headers?.code === 503) return; // late, or settled meanwhile
      this.#probing.delete(token);
      probed.run.settle(probed.index, pubAckOutcome(msg, probed.subject));
      this.#released();
      return;
    }
    this.#pending.delete(token);
    this.#writer.acked(token);
    this.#slots.release();
    if (msg.data.length === 0 && msg.headers?.code === 503) {
      this.#noResponders(pending);
      return;
    }
    pending.run.settle(pending.index, pubAckOutcome(msg, pending.subject));
    this.#released();
  };

  /** 503 no responders: no stream for the subject (charged) if JetStream answers, else unavailable. */
  #noResponders(p: Pending): void {
    this.#onNoResponders();
    this.#probing.set(p.token, p);
    void this.#jetStream.up().then((up) => {
      if (this.#probing.get(p.token) !== p) return; // settled by a disconnect meanwhile
      this.#probing.delete(p.token);
      p.run.settle(p.index, failed(up ? noStreamCaptures(p.subject) : noResponders(p.subject), true));
      this.#released();
    });
  }

  /**
   * No PubAck within timeoutMs: the message's failure (an attempt) if the server was heard from
   * since it was sent, the broker's (no attempt) if the link stayed silent through the probe.
   */
  #overdue(p: Pending): void {
    this.#slots.release();
    this.#probing.set(p.token, p);
    void this.#probe.alive().then((alive) => {
      if (this.#probing.get(p.token) !== p) return; // settled by a PubAck or a disconnect meanwhile
      this.#probing.delete(p.token);
      const error = alive
        ? timedOut(p.subject, this.#timeoutMs)
        : linkInDoubt(p.subject, this.#timeoutMs, this.#probe.probeMs);
      p.run.settle(p.index, failed(error, true));
      this.#released();
    });
  }

  /** A publish was settled: report idleness to close() when it was the last. */
  #released(): void {
    if (this.#pending.size === 0 && this.#probing.size === 0 && this.#idle !== undefined) this.#idle();
  }

  #failPending(outcome: (subject: string) => PublishOutcome): void {
    if (this.#pending.size === 0) return;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) {
      this.#slots.release();
      p.run.settle(p.index, outcome(p.subject));
    }
    this.#released();
  }
}
