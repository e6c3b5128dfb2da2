import { OutboxValidationError } from '../../errors.js';

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
