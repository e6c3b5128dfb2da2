import { createHash } from 'node:crypto';

/** A query's text, with the name it is prepared under (undefined: sent unprepared). */
export interface Statement {
  readonly name: string | undefined;
  readonly text: string;
}

/**
 * `text` under a name derived from it (`<prefix>_<digest>`), so that each distinct text — one
 * per schema — is prepared once per connection; unnamed when `prepared` is false (PgBouncer in
 * transaction mode).
 */
export function namedStatement(prefix: string, text: string, prepared: boolean): Statement {
  const digest = createHash('sha1').update(text).digest('hex').slice(0, 16);
  return { name: prepared ? `${prefix}_${digest}` : undefined, text };
}
