import { IllegalOperationError } from 'amqplib';
import type { PublishError } from '../../errors.js';
import { DELIVERED, failed, type OutboxMessage, type Publisher, type PublishOutcome } from '../contract.js';
import { isOutcome } from '../core/batch-run.js';
import { CallAbort } from '../core/call-abort.js';
import { connectError } from '../core/closed.js';
import { raceDeadline } from '../core/deadline.js';
import { DeadlineSweep } from '../core/deadline-sweep.js';
import { InFlight } from '../core/in-flight.js';
import { closeWithin, PublisherLifecycle } from '../core/lifecycle.js';
import { acquireSlot, Slots } from '../core/slots.js';
import {
  abortedCall,
  blockedError,
  brokerSizeLimit,
  cancelledBeforeSend,
  cannotCarry,
  channelLost,
  confirmOverdue,
  exchangeRefused,
  nacked,
  publishDefect,
  refusedExchange,
  stalled,
  tooLarge,
  unroutable,
} from './classify.js';
import { Connector } from './connector.js';
import { describeUrl } from './link.js';
import type { ResolvedRabbitMqOptions } from './options.js';
import { type Entry, Run, type Session } from './session.js';
import { type Item, overFrame, prepare } from './wire.js';

/** The RabbitMQ publisher (see {@link rabbitmqPublisher} in index.ts for what it guarantees). */
export class RabbitMqPublisher implements Publisher {
  readonly name = 'rabbitmq';
  readonly #o: ResolvedRabbitMqOptions;
  readonly #lifecycle = new PublisherLifecycle('RabbitMQ');
  /** Aborts the calls still in flight once close() gave them `timeoutMs` to finish. */
  readonly #forceClose = new AbortController();
  readonly #slots: Slots;
  /** Messages awaiting their confirm, by token, in send order (= deadline order). */
  readonly #pending = new Map<number, Entry>();
  readonly #sweep = new DeadlineSweep(
    this.#pending,
    (entry) => this.#expire(entry),
    () => undefined,
  );
  #token = 0;
  /** `maxMessageBytes`, lowered to the broker's limit once it refused a message for its size. */
  #maxMessageBytes: number;
  readonly #inFlight = new InFlight();
  readonly #connector: Connector;

  constructor(options: ResolvedRabbitMqOptions) {
    this.#o = options;
    this.#connector = new Connector(options);
    this.#slots = new Slots(options.maxInFlight);
    this.#maxMessageBytes = options.maxMessageBytes;
  }

  async publish(batch: readonly OutboxMessage[], signal: AbortSignal): Promise<PublishOutcome[]> {
    this.#lifecycle.assertOpen();
    const { exchange, destination, source } = this.#o;
    const wire = { exchange, destination, source, maxMessageBytes: this.#maxMessageBytes };
    const run = new Run(batch.map((message) => prepare(message, wire)));
    if (run.done) return run.promise;

    return this.#inFlight.track(this.#call(run, signal));
  }

  close(): Promise<void> {
    return this.#lifecycle.close(() => this.#shutdown());
  }

  /** One call: sends, then waits for every outcome; aborted by its signal or a close out of time. */
  async #call(run: Run, signal: AbortSignal): Promise<PublishOutcome[]> {
    const abort = new CallAbort({ signal, closing: this.#forceClose.signal });
    abort.onAbort((cause, reason) => this.#abortRun(run, abortedCall(cause, reason)));
    try {
      await this.#send(run, abort).catch((error: unknown) => {
        const outcome = publishDefect(error);
        run.settleRest(
          0,
          () => outcome,
          () => outcome,
        );
      });
      return await run.promise;
    } finally {
      abort.dispose();
    }
  }

  /** Connects, checks the exchanges, then writes every message, many confirms in flight. */
  async #send(run: Run, abort: CallAbort): Promise<void> {
    const { items } = run;
    const timeoutMs = this.#o.timeoutMs;
    const failRest = (from: number, outcome: PublishOutcome): void =>
      run.settleRest(
        from,
        () => outcome,
        () => outcome,
      );
    if (run.aborted !== undefined) return failRest(0, failed(run.aborted, true));

    let session: Session;
    try {
      session = await raceDeadline(this.#connector.session(), timeoutMs, abort.aborted);
    } catch (error) {
      return failRest(0, failed(this.#connectError(error, run), true));
    }
    if (session.link.blocked !== undefined)
      return failRest(0, failed(blockedError(session.link.blocked), true));

    const names = new Set<string>();
    for (const item of items) if (!isOutcome(item)) names.add(item.exchange);
    let refused: Map<string, PublishError>;
    try {
      const checking = session.checkExchanges(names, this.#o.assertExchange, timeoutMs);
      refused = await raceDeadline(checking, timeoutMs, abort.aborted);
    } catch (error) {
      return failRest(0, failed(this.#connectError(error, run), true));
    }

    for (let i = 0; i < items.length; i += 1) {
      const item = items[i]!;
      if (isOutcome(item)) continue;
      const refusal = refused.get(item.exchange);
      if (refusal !== undefined) {
        run.settle(i, failed(refusal, refusal.retryable));
        continue;
      }
      if (item.content.length > this.#maxMessageBytes) {
        run.settle(i, tooLarge(item.eventId, item.content.length, this.#maxMessageBytes));
        continue;
      }
      const overframe = overFrame(item, session.frameMax);
      if (overframe !== undefined) {
        run.settle(i, overframe);
        continue;
      }
      if (run.aborted !== undefined) return failRest(i, failed(run.aborted, true));
      if (!this.#slots.tryAcquire() && !(await acquireSlot(this.#slots, abort))) {
        return failRest(i, failed(run.aborted ?? cancelledBeforeSend(item), true));
      }
      if (run.aborted !== undefined) {
        // The abort released this run's slots before it cancelled the wait: one came to us.
        this.#slots.release();
        return failRest(i, failed(run.aborted, true));
      }
      if (!session.writable && !session.closed && !(await session.waitForDrain(timeoutMs, abort))) {
        if (run.aborted !== undefined || !session.closed) {
          this.#slots.release();
          return failRest(i, failed(run.aborted ?? stalled(session.link.blocked, timeoutMs), true));
        }
      }
      if (session.closed) {
        this.#slots.release();
        const lost = (rest: Item): PublishOutcome => this.#lost(session, rest);
        return run.settleRest(i, lost, lost);
      }
      this.#publishOne(session, run, i, item);
    }
  }

  /** Hands one message to the channel (holding a slot); its confirm settles its outcome. */
  #publishOne(session: Session, run: Run, index: number, item: Item): void {
    const { timeoutMs } = this.#o;
    const entry: Entry = {
      run,
      index,
      item,
      session,
      token: this.#token++,
      deadline: performance.now() + timeoutMs,
      mark: session.activity.mark(),
      returned: undefined,
      slot: true,
      next: undefined,
    };
    session.track(entry);
    let accepted: boolean;
    try {
      accepted = session.channel.publish(item.exchange, item.routingKey, item.content, item.options, (err) =>
        this.#onConfirm(entry, err),
      );
    } catch (error) {
      session.untrack(entry);
      this.#releaseSlot(entry);
      if (error instanceof IllegalOperationError) {
        session.closed = true;
        run.settle(index, this.#lost(session, item));
      } else {
        run.settle(index, cannotCarry(item, error));
      }
      return;
    }
    if (!accepted) session.writable = false;
    run.sent.push(entry);
    this.#pending.set(entry.token, entry);
    this.#sweep.added(timeoutMs);
  }

  /** A confirm (ack or nack) arrived, or the channel closed before it did. */
  #onConfirm(entry: Entry, err: unknown): void {
    const { session, run, index } = entry;
    if (!session.closed) session.activity.heard();
    session.untrack(entry);
    this.#pending.delete(entry.token);
    this.#releaseSlot(entry);
    if (run.outcomes[index] !== undefined) return; // timed out or aborted meanwhile
    run.settle(index, this.#confirmed(entry, err));
  }

  #confirmed({ session, item, returned }: Entry, err: unknown): PublishOutcome {
    if (returned !== undefined) return unroutable(item, returned);
    if (err === null || err === undefined) return DELIVERED;
    const nack = nacked(item, err);
    if (nack !== undefined) return nack;
    session.closed = true;
    return this.#lost(session, item, err);
  }

  /** No confirm within timeoutMs. */
  #expire(entry: Entry): void {
    const { run, index, item, session } = entry;
    if (run.outcomes[index] !== undefined) return;
    this.#releaseSlot(entry);
    const state = {
      blocked: session.link.blocked,
      channelClosed: session.closed,
      silent: session.activity.silentSince(entry.mark),
    };
    run.settle(index, confirmOverdue(item.eventId, this.#o.timeoutMs, state));
  }

  /** The call's signal aborted, or close() ran out of time: what it sent fails now, retryable. */
  #abortRun(run: Run, error: PublishError): void {
    run.aborted = error;
    for (const entry of run.sent) {
      this.#pending.delete(entry.token);
      this.#releaseSlot(entry);
      run.settle(entry.index, failed(error, true));
    }
  }

  #releaseSlot(entry: Entry): void {
    if (!entry.slot) return;
    entry.slot = false;
    this.#slots.release();
  }

  /**
   * The outcome of a message whose channel closed before its confirm: the broker's reason
   * decides (its size, its exchange), else the broker is unavailable.
   */
  #lost(session: Session, item: Item, cause?: unknown): PublishOutcome {
    const error = session.error;
    const limit = brokerSizeLimit(error);
    if (limit !== undefined) {
      if (limit < this.#maxMessageBytes) this.#maxMessageBytes = limit;
      if (item.content.length > limit) return tooLarge(item.eventId, item.content.length, limit);
    }
    const exchange = refusedExchange(error);
    if (exchange !== undefined && error !== undefined) {
      session.exchanges.clear();
      if (exchange === item.exchange) return failed(exchangeRefused(item.exchange, error), true);
    }
    return channelLost(item, error?.message ?? session.link.error?.message, error ?? cause);
  }

  #connectError(error: unknown, run: Run): PublishError {
    if (run.aborted !== undefined) return run.aborted;
    const { url } = this.#o;
    return connectError('RabbitMQ', url === undefined ? 'the given connection' : describeUrl(url), error);
  }

  async #shutdown(): Promise<void> {
    const { timeoutMs } = this.#o;
    if (this.#inFlight.size > 0) {
      const calls = this.#inFlight.settled();
      if (!(await closeWithin(calls, timeoutMs))) {
        this.#forceClose.abort();
        await calls;
      }
    }
    await this.#connector.terminate();
    this.#sweep.stop();
  }
}
