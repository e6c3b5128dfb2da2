import { OutboxValidationError } from '../errors.js';

/** Option checks every publisher and consumer adapter shares; each error names the option and the fix. */

export function checkInboxAndHandler(options: {
  readonly inbox?: unknown;
  readonly handler?: unknown;
}): void {
  const inbox = options?.inbox as { handle?: unknown } | undefined;
  if (!inbox || typeof inbox.handle !== 'function')
    throw new OutboxValidationError('inbox', 'is missing', 'Pass the inbox from createInbox().');
  if (typeof options.handler !== 'function')
    throw new OutboxValidationError('handler', 'is missing', 'Pass the function that applies an event.');
}

/** Exactly one of two ways to reach the broker (a URL or an existing client/connection). */
export function checkExactlyOne(field: string, other: string, hasField: boolean, hasOther: boolean): void {
  if (hasField === hasOther)
    throw new OutboxValidationError(field, `or ${other} is required (exactly one)`, 'Give one of them.');
}

/** Required non-empty names (stream, group, topic …). */
export function checkNames<O extends object>(options: O, names: readonly (keyof O & string)[]): void {
  for (const name of names) {
    const v = options[name];
    if (typeof v !== 'string' || v === '') throw new OutboxValidationError(name, 'is missing', 'Name it.');
  }
}

/** Optional integers, each with its own minimum. */
export function checkIntegers<O extends object>(
  options: O,
  minimums: Partial<Record<keyof O & string, number>>,
  fix = 'Use a positive integer.',
): void {
  for (const [name, min] of Object.entries(minimums) as Array<[keyof O & string, number]>) {
    const v = options[name];
    if (v !== undefined && (!Number.isInteger(v) || (v as number) < min))
      throw new OutboxValidationError(name, `is ${String(v)}`, fix);
  }
}

/** Throws unless `value` is undefined or a positive integer. */
export function checkPositiveInteger(field: string, value: number | undefined): void {
  if (value !== undefined && (!Number.isInteger(value) || value <= 0)) {
    throw new OutboxValidationError(field, `must be a positive integer, got ${value}`, 'Fix the option');
  }
}

/** `value` checked by {@link checkPositiveInteger}, or `fallback` when it is undefined. */
export function positiveInteger(field: string, value: number | undefined, fallback: number): number {
  checkPositiveInteger(field, value);
  return value ?? fallback;
}

/** How a publisher was told to reach its broker, for {@link checkUrlOrClient}. */
export interface BrokerAddress {
  /** A usable `url` was given (non-empty). */
  readonly hasUrl: boolean;
  /** `url` was given at all (default: `hasUrl`); giving it with a `client` is refused. */
  readonly urlGiven?: boolean;
  readonly hasClient: boolean;
  /** `clientOptions` were given; they apply only to a client made from `url`. */
  readonly hasClientOptions?: boolean;
  /** What a `url` looks like for this broker, for the fix: `redis://host:port`. */
  readonly urlExample: string;
}

/** Exactly one of `url` and `client`; `clientOptions` only with `url`. Errors name the field and the fix. */
export function checkUrlOrClient(address: BrokerAddress): void {
  if (!address.hasUrl && !address.hasClient) {
    throw new OutboxValidationError(
      'url',
      'is missing',
      `Give \`url\` (${address.urlExample}) or a \`client\``,
    );
  }
  if ((address.urlGiven ?? address.hasUrl) && address.hasClient) {
    throw new OutboxValidationError('client', 'was given together with `url`', 'Give only one of them');
  }
  if (address.hasClient && address.hasClientOptions === true) {
    throw new OutboxValidationError(
      'clientOptions',
      'only apply to a client made from `url`',
      'Configure your own client yourself',
    );
  }
}
