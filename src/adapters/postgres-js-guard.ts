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
