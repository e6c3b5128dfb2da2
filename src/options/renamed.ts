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
 */

/** Old spelling → new name, for one component (e.g. `{ servers: 'url', connection: 'client' }`). */
export type Renames<New extends string> = Readonly<Record<string, New>>;

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
  for (const [old, name] of Object.entries(renames)) {
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
    copy[name] = value;
    delete copy[old];
    warnRenamed(component, old, name);
  }
  return (copy ?? options) as O;
}

/** One DeprecationWarning per component and spelling for the process. */
export function warnRenamed(component: string, old: string, name: string): void {
  const key = `${component}\u0000${old}`;
  if (warned.has(key)) return;
  warned.add(key);
  process.emitWarning(
    `${component}: option \`${old}\` is deprecated, use \`${name}\` (the old spelling goes in the next minor version)`,
    { type: 'DeprecationWarning', code: 'TXO_DEPRECATED_OPTION' },
  );
}
