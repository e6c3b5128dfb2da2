import { OutboxValidationError } from '../errors.js';

/**
 * The option vocabulary (one name per concept, the same across publishers, consumers and the CLI
 * config) replaced some earlier per-broker spellings. An old spelling still works for one minor
 * version: it is read as the new name, with one `DeprecationWarning` per component and spelling
 * for the process. Giving both spellings is refused, naming the two.
 *
 *   url            was  servers (NATS), brokers (Kafka)
 *   client         was  connection (NATS, RabbitMQ), producer (Kafka)
 *   clientOptions  was  connectionOptions (NATS), socketOptions (RabbitMQ)
 *   destination    was  subject (NATS), topic (Kafka, MQTT), routingKey (RabbitMQ), stream (Redis)
 *   maxInFlight    was  concurrency (webhook publisher)
 *   group          was  groupId (Kafka consumer)
 *   dedupWindowMs  was  duplicateWindowMs (NATS), dedupWindowSeconds (Redis, in seconds)
 *   ceSource       was  source (every publisher: the CloudEvents `source` attribute they stamp)
 */

/** An old spelling whose value changes on the way: a unit (`dedupWindowSeconds` → `dedupWindowMs`). */
export interface Converted<New extends string = string> {
  readonly name: New;
  /** The old value as the new name takes it (a non-number is passed on as it is, for the check to refuse). */
  readonly convert: (old: unknown) => unknown;
  /** Said in the warning after the new name, e.g. `in ms: the seconds × 1000`. */
  readonly note: string;
}

/** Old spelling → new name, for one component (e.g. `{ servers: 'url', connection: 'client' }`). */
export type Renames<New extends string> = Readonly<Record<string, New | Converted<New>>>;

/** `{ name, convert }` for an old spelling in seconds of a new name in milliseconds. */
export function secondsToMs<New extends string>(name: New): Converted<New> {
  return {
    name,
    convert: (old) => (typeof old === 'number' ? old * 1000 : old),
    note: 'in milliseconds: the seconds × 1000',
  };
}

const warned = new Set<string>();

/**
 * `options` with every old spelling in `renames` moved to its new name, warning once per
 * `component` and spelling; throws OutboxValidationError when both spellings are given. The
 * object returned is a fresh copy; `options` is not changed. A spelling whose value is
 * `undefined` counts as absent.
 */
export function renamedOptions<O extends object>(component: string, options: O, renames: Renames<string>): O {
  if (options === null || typeof options !== 'object') return options;
  let copy: Record<string, unknown> | undefined;
  for (const [old, rename] of Object.entries(renames)) {
    const name = typeof rename === 'string' ? rename : rename.name;
    const value = (options as Record<string, unknown>)[old];
    if (value === undefined) continue;
    if ((options as Record<string, unknown>)[name] !== undefined) {
      throw new OutboxValidationError(
        old,
        `is the deprecated spelling of \`${name}\`, which is given too`,
        `Keep \`${name}\` only.`,
      );
    }
    copy ??= { ...(options as Record<string, unknown>) };
    copy[name] = typeof rename === 'string' ? value : rename.convert(value);
    delete copy[old];
    warnRenamed(component, old, name, typeof rename === 'string' ? undefined : rename.note);
  }
  return (copy ?? options) as O;
}

/** One DeprecationWarning per component and spelling for the process; `note` follows the new name. */
export function warnRenamed(component: string, old: string, name: string, note?: string): void {
  const key = `${component}\u0000${old}`;
  if (warned.has(key)) return;
  warned.add(key);
  process.emitWarning(
    `${component}: option \`${old}\` is deprecated, use \`${name}\`${note === undefined ? '' : ` (${note})`} (the old spelling goes in the next minor version)`,
    { type: 'DeprecationWarning', code: 'TXO_DEPRECATED_OPTION' },
  );
}
