/** A pino-compatible logger port. The default logs nothing. */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const noop = (): void => {};

export const silentLogger: Logger = Object.freeze({ debug: noop, info: noop, warn: noop, error: noop });
