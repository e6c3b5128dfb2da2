/** Settles like `promise`, or rejects on timeout or when `aborted` rejects, whichever comes first. */
export function raceDeadline<T>(
  promise: Promise<T>,
  timeoutMs: number,
  aborted?: Promise<never>,
): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const error = new Error(`Timed out after ${timeoutMs} ms`);
      error.name = 'TimeoutError';
      reject(error);
    }, timeoutMs);
  });
  const racers = aborted === undefined ? [promise, deadline] : [promise, deadline, aborted];
  return Promise.race(racers).finally(() => clearTimeout(timer));
}
