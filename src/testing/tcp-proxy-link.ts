/**
 * The forwarding under `TcpProxy`: the faults a proxy applies right now (`LinkFaults`: a stall,
 * a latency) and one proxied connection (`Link`: the client's socket, its upstream leg to the
 * target, and a `Forward` per direction that writes chunks in order, held by a stall and
 * delayed by the latency, with backpressure).
 */
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface Address {
  readonly host: string;
  readonly port: number;
}

/** Client to target ('upstream') or target to client ('downstream'). */
export type Direction = 'upstream' | 'downstream';

/**
 * How a connection is hung up when its other leg went away, and by `cut()`/`refuse()`/`close()`:
 * `'end'` closes it cleanly (FIN), `'reset'` sends an RST.
 */
export type HangUp = 'end' | 'reset';

interface Stall {
  readonly only: Direction | undefined;
  /** Discards what it covers instead of holding it. */
  readonly drop: boolean;
  readonly released: Promise<void>;
  readonly release: () => void;
}

/**
 * The faults every link of one proxy obeys: a stall (both ways or one way, holding or dropping)
 * and a latency per chunk.
 */
export class LinkFaults {
  #stall: Stall | undefined;
  /** Added to every chunk while it is above 0. */
  latencyMs = 0;

  get stalled(): boolean {
    return this.#stall !== undefined;
  }

  /** Whether a stall holds what goes in `direction` (to deliver it when the stall ends). */
  holds(direction: Direction): boolean {
    return this.#covers(direction) && this.#stall?.drop === false;
  }

  /** Whether a stall discards what goes in `direction`. */
  drops(direction: Direction): boolean {
    return this.#covers(direction) && this.#stall?.drop === true;
  }

  #covers(direction: Direction): boolean {
    return this.#stall !== undefined && (this.#stall.only === undefined || this.#stall.only === direction);
  }

  /** Resolves when the current stall ends (at once when there is none). */
  released(): Promise<void> {
    return this.#stall?.released ?? Promise.resolve();
  }

  /**
   * Starts a stall that holds (or, `drop`, discards) what goes in `only` (default: both ways),
   * or changes the current one (it still ends once).
   */
  stall(only: Direction | undefined, drop = false): void {
    if (this.#stall) {
      this.#stall = { ...this.#stall, only, drop };
      return;
    }
    let release = (): void => undefined;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    this.#stall = { only, drop, released, release };
  }

  unstall(): void {
    const stall = this.#stall;
    this.#stall = undefined;
    stall?.release();
  }
}

/** One direction of a link: chunks in order, held (or dropped) by a stall and delayed by the latency. */
class Forward {
  #chain: Promise<void> = Promise.resolve();
  #queued = 0;
  #congested = false;

  constructor(
    readonly from: Socket,
    readonly to: Socket,
    readonly direction: Direction,
    private readonly faults: LinkFaults,
  ) {
    // By hand, not with pipe(): a pipe resumes its source on 'drain', even while stalled.
    from.on('data', (chunk: Buffer) => this.#take(chunk));
  }

  #take(chunk: Buffer): void {
    if (this.faults.drops(this.direction)) return;
    const due = Date.now() + this.faults.latencyMs;
    if (this.#queued === 0 && this.faults.latencyMs === 0 && !this.faults.holds(this.direction)) {
      this.#write(chunk);
      return;
    }
    this.#queued++;
    if (this.faults.holds(this.direction)) this.from.pause();
    this.#chain = this.#chain.then(async () => {
      while (this.faults.holds(this.direction)) await this.faults.released();
      const wait = due - Date.now();
      if (wait > 0) await sleep(wait);
      this.#queued--;
      this.#write(chunk);
      this.flow();
    });
  }

  #write(chunk: Buffer): void {
    if (this.to.destroyed || this.to.writableEnded) return;
    if (this.to.write(chunk) || this.#congested) return;
    this.#congested = true;
    this.from.pause();
    this.to.once('drain', () => {
      this.#congested = false;
      this.flow();
    });
  }

  /** Runs `then` once every chunk taken so far went out. */
  after(then: () => void): void {
    this.#chain = this.#chain.then(then);
  }

  /** Stops reading when a stall holds this direction. */
  hold(): void {
    if (this.faults.holds(this.direction)) this.from.pause();
  }

  /** Reads again, unless a stall holds this direction or the other side is full. */
  flow(): void {
    if (!this.#congested && !this.faults.holds(this.direction) && this.from.isPaused()) this.from.resume();
  }
}

/** A client connection and its upstream leg (once connected). */
export class Link {
  #upstream: Socket | undefined;
  #forwards: readonly Forward[] = [];
  #gone = false;

  constructor(
    readonly client: Socket,
    private readonly faults: LinkFaults,
    private readonly hangUp: HangUp,
    private readonly onGone: () => void,
  ) {
    client.on('error', () => this.drop(hangUp));
    client.on('close', () => this.#closed());
  }

  /** Opens the upstream leg and forwards both ways (nothing when the client is gone already). */
  connect(target: Address): void {
    if (this.#gone || this.client.destroyed) return;
    const upstream = connect(target.port, target.host);
    this.#upstream = upstream;
    upstream.on('error', () => this.drop(this.hangUp));
    upstream.on('close', () => this.#closed());
    this.#forwards = [
      new Forward(this.client, upstream, 'upstream', this.faults),
      new Forward(upstream, this.client, 'downstream', this.faults),
    ];
    if (this.hangUp === 'end') {
      // The far side's FIN goes on after the bytes before it, as a pipe would end it.
      for (const f of this.#forwards) f.from.once('end', () => f.after(() => endQuietly(f.to)));
    }
    this.hold();
    this.flow();
  }

  hold(): void {
    for (const f of this.#forwards) f.hold();
  }

  flow(): void {
    for (const f of this.#forwards) f.flow();
  }

  /** Destroys both legs now: FIN (`'end'`) or RST (`'reset'`). */
  drop(how: HangUp): void {
    if (!this.#gone) {
      this.#gone = true;
      this.onGone();
    }
    for (const s of [this.client, this.#upstream]) {
      if (s === undefined || s.destroyed) continue;
      if (how === 'reset') s.resetAndDestroy();
      else s.destroy();
    }
  }

  #closed(): void {
    if (this.hangUp === 'reset') {
      this.drop('reset');
      return;
    }
    const upstreamClosed = this.#upstream === undefined || this.#upstream.destroyed;
    if (this.client.destroyed && upstreamClosed && !this.#gone) {
      this.#gone = true;
      this.onGone();
    }
  }
}

function endQuietly(socket: Socket): void {
  if (!socket.destroyed && !socket.writableEnded) socket.end();
}
