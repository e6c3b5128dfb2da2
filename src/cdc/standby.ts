import { errorMessage } from '../errors.js';
import type { Logger } from '../logger.js';
import { redactText } from '../redact.js';

/**
 * When a CDC relay that holds the leases but cannot stream should give them up. A stream that
 * failed to start, or died before it delivered anything, since longer than a lease period is not
 * a blip: the relay releases every lease and stands by for a randomised while (at least one lease
 * period), so a healthy standby takes over instead of waiting behind a relay that renews and fails.
 */
export class StreamTrouble {
  #since: number | undefined;

  constructor(
    private readonly leaseMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** A stream failed to start or ended; the trouble began at the first one since the last delivery. */
  failed(): void {
    this.#since ??= this.now();
  }

  /** The stream delivered something: it works. */
  delivered(): void {
    this.#since = undefined;
  }

  /** True when the relay should release its leases and stand by. */
  get yield(): boolean {
    return this.#since !== undefined && this.now() - this.#since > this.leaseMs;
  }

  /** How long to stand by: one to two lease periods (randomised, so relays do not move in step). */
  standbyMs(random: () => number = Math.random): number {
    this.#since = undefined;
    return Math.round(this.leaseMs * (1 + random()));
  }
}

/**
 * A failure that repeats, said once with its cause (and stack), then at most every `reminderMs`
 * as a reminder with how long and how often, without a stack; and once when it clears. The
 * OutageLog's manner, for the CDC loop's errors (a line per attempt would bury everything else).
 */
export class RepeatedErrorLog {
  #first: { message: string; at: number; lastLog: number; times: number } | undefined;

  constructor(
    private readonly logger: Logger,
    private readonly context: Readonly<Record<string, unknown>>,
    private readonly reminderMs = 30_000,
    private readonly now: () => number = Date.now,
  ) {}

  report(error: unknown, msg: string, extra: Readonly<Record<string, unknown>> = {}): void {
    const message = redactText(errorMessage(error));
    const code = (error as { code?: unknown }).code;
    const now = this.now();
    const f = this.#first;
    if (f === undefined || f.message !== message) {
      this.#first = { message, at: now, lastLog: now, times: 1 };
      this.logger.error({ ...this.context, ...extra, err: error }, msg);
      return;
    }
    f.times += 1;
    if (now - f.lastLog < this.reminderMs) {
      this.logger.debug({ ...this.context, ...extra, code, error: message }, msg);
      return;
    }
    f.lastLog = now;
    this.logger.error(
      { ...this.context, ...extra, code, error: message, failingForMs: now - f.at, attempts: f.times },
      `${msg} (still failing)`,
    );
  }

  /** The loop got through: says so if it was failing. */
  cleared(): void {
    const f = this.#first;
    if (f === undefined) return;
    this.#first = undefined;
    this.logger.info(
      { ...this.context, failedForMs: this.now() - f.at, attempts: f.times },
      'CDC stream running again',
    );
  }
}
