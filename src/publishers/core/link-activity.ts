/**
 * Was the broker heard from since a message was sent? Asked when its acknowledgement is
 * overdue: a broker that answers others but not this one failed this message (an attempt);
 * one silent since the send leaves the link in doubt (a network stall, a half-open TCP
 * connection the client has not noticed yet), which is the broker being unreachable and
 * must not burn the event's attempts. The publisher calls `heard()` on every answer.
 */
export class LinkActivity {
  #heard = 0;

  /** An answer (acknowledgement, refusal, any inbound packet) came in. */
  heard(): void {
    this.#heard += 1;
  }

  /** A mark of what was heard so far, taken when a message is sent. */
  mark(): number {
    return this.#heard;
  }

  /** True when nothing was heard since `mark`. */
  silentSince(mark: number): boolean {
    return this.#heard === mark;
  }
}
