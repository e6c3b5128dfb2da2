import { OutboxValidationError } from '../errors.js';

// 58 at most: the wake-up channel `txo_<schema>` must fit PostgreSQL's 63-byte identifiers.
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,57}$/;

/** Validates a schema name and returns it double-quoted, safe to splice into SQL text. */
export function quoteSchema(schema: string, field = 'schema'): string {
  if (typeof schema !== 'string' || !IDENTIFIER.test(schema)) {
    throw new OutboxValidationError(
      field,
      `${JSON.stringify(schema)} is not a valid schema name`,
      'Use 1-58 characters: lowercase letters, digits and underscores, not starting with a digit (e.g. "outbox").',
    );
  }
  return `"${schema}"`;
}

/** Replaces the `{{schema}}` placeholder in a statement with the quoted schema name. */
export function withSchema(sql: string, quotedSchema: string): string {
  return sql.replaceAll('{{schema}}', quotedSchema);
}
