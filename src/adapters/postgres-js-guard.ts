/**
 * A postgres.js transaction handle that refuses statements once its connection is gone.
 *
 * postgres.js (3.4.9) writes a statement sent on a transaction whose connection has closed to a
 * socket it has already dropped: the write throws an uncaught TypeError on a later tick (which ends
 * the process), the statement never settles, and `sql.end()` then waits for it forever. That
 * includes the ROLLBACK or COMMIT that `sql.begin` sends after its callback. So the inbox's runner
 * hands the handler this guard instead of the raw `tx`, and once the connection is known lost, a
 * new statement throws the connection's error instead, and the callback never returns to
 * postgres.js (`sql.begin` has already rejected with that error).
 *
 * Shared by the postgres.js adapter and Drizzle's postgres.js driver (whose `db.transaction` is
 * `sql.begin`): `guardedBegin` runs the inbox's transaction, and each guards the handle its
 * handler writes through.
 */

/** Set once the transaction's connection is known lost: the error to throw. */
export interface ConnectionState {
  lost: unknown;
  /** True for an error that means the connection is gone. */
  readonly isLoss: (error: unknown) => boolean;
}

/** Methods that send a statement on the handle (`tx.unsafe`, `tx.file` …). */
const SENDS = new Set<string | symbol>(['unsafe', 'file', 'notify', 'prepare']);

function isTemplate(value: unknown): boolean {
  return Array.isArray(value) && Array.isArray((value as { raw?: unknown }).raw);
}

/**
 * Notes a lost connection from a statement's own failure, as postgres.js delivers it (its
 * `reject`): before the handler awaiting it resumes, which may send the next statement at once.
 * Wrapping it neither runs the statement (a postgres.js query runs when awaited) nor changes it.
 */
function watch(query: unknown, state: ConnectionState): unknown {
  const q = query as { reject?: unknown } | null;
  if (typeof q === 'object' && q !== null && typeof q.reject === 'function') {
    const reject = q.reject as (error: unknown) => unknown;
    q.reject = (error: unknown) => {
      if (state.lost === undefined && state.isLoss(error)) state.lost = error;
      return reject(error);
    };
  }
  return query;
}

/** `tx` behind a guard that throws `state.lost` for any statement sent once it is set. */
export function guarded<T extends object>(tx: T, state: ConnectionState): T {
  const refuseIfLost = () => {
    if (state.lost !== undefined) throw state.lost;
  };
  return new Proxy(tx, {
    apply(target, thisArg, args: unknown[]) {
      // tx`…` sends a statement; tx(identifier) and tx(rows, …columns) only build a fragment.
      if (!isTemplate(args[0])) return Reflect.apply(target as (...a: unknown[]) => unknown, thisArg, args);
      refuseIfLost();
      return watch(Reflect.apply(target as (...a: unknown[]) => unknown, thisArg, args), state);
    },
    get(target, key) {
      const value: unknown = Reflect.get(target, key);
      if (typeof value !== 'function') return value;
      if (SENDS.has(key)) {
        return (...args: unknown[]) => {
          refuseIfLost();
          return watch((value as (...a: unknown[]) => unknown).apply(target, args), state);
        };
      }
      if (key === 'savepoint') {
        // The savepoint's own handle sends on the same connection: guard it too.
        return (...args: unknown[]) => {
          refuseIfLost();
          const wrapped = args.map((a) =>
            typeof a === 'function'
              ? (inner: object) => (a as (t: object) => unknown)(guarded(inner, state))
              : a,
          );
          return (value as (...a: unknown[]) => unknown).apply(target, wrapped);
        };
      }
      return value;
    },
  });
}

/** postgres.js's own connection codes, as the Node network codes the port speaks. */
export const CONNECTION_CODES: Readonly<Record<string, string>> = {
  CONNECTION_CLOSED: 'ECONNRESET',
  CONNECTION_DESTROYED: 'ECONNRESET',
  CONNECTION_ENDED: 'ECONNRESET', // sql.end() under a statement: not the event's fault either
  CONNECT_TIMEOUT: 'ETIMEDOUT',
};

/**
 * The socket is gone, as postgres.js reports it on a statement or on `sql.begin`: its own
 * CONNECTION_CLOSED … (PostgreSQL ending the session under a statement comes as CONNECTION_CLOSED
 * too), or the socket's error. Not a 57P01 itself: postgres.js 3.4.9 also hands a stale one to the
 * first statement on the connection that replaced the lost one.
 */
export function lostConnection(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code in CONNECTION_CODES || /^E[A-Z]+$/.test(code));
}

/** What the callback returns once its connection is lost: postgres.js then sends nothing more. */
function never(): Promise<never> {
  return new Promise<never>(() => undefined);
}

/**
 * Runs `body` as the callback of a postgres.js transaction, `begin(callback)` (`sql.begin(…)`, or
 * Drizzle's `db.transaction(…)` on postgres.js), so that no ROLLBACK or COMMIT is sent on a lost
 * connection: once `state.lost` is set (by the guarded handle, or by `begin` rejecting with a lost
 * connection while the handler still runs), the callback never returns, and this rejects with
 * what `begin` rejected with. `body` guards the handle it hands the handler with `guarded(…, state)`.
 * `handlerFailed` is told of an error `body` threw while the connection was fine.
 */
export async function guardedBegin<H, T>(
  begin: (callback: (handle: H) => Promise<T>) => PromiseLike<unknown>,
  body: (handle: H, state: ConnectionState) => Promise<T>,
  handlerFailed?: (error: unknown) => void,
): Promise<T> {
  const state: ConnectionState = { lost: undefined, isLoss: lostConnection };
  let thrown: { error: unknown } | undefined;
  const begun = begin(async (handle) => {
    let value: T;
    try {
      value = await body(handle, state);
    } catch (error) {
      // The ROLLBACK postgres.js sends next must not go to a lost connection.
      if (state.lost !== undefined) return never();
      thrown = { error };
      throw error;
    }
    // Nor the COMMIT.
    return state.lost === undefined ? value : never();
  });
  // postgres.js' begin rejects as soon as the connection closes, while the handler may still run.
  begun.then(undefined, (error: unknown) => {
    if (state.lost === undefined && error !== thrown?.error && lostConnection(error)) state.lost = error;
  });
  try {
    return (await begun) as T;
  } catch (error) {
    if (thrown?.error === error && state.lost === undefined) handlerFailed?.(error);
    throw error;
  }
}
