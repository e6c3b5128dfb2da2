/**
 * The config file speaks the library's vocabulary: `url` for every publisher, `ceSource` for the
 * CloudEvents source it stamps. A NATS publisher's `servers`, a Kafka publisher's `brokers` and
 * any publisher's `source` are earlier spellings, still read for one minor version (the caller
 * warns, naming the file and the field).
 */

/** Old spelling → new name, for a publisher of every kind. */
const EVERY_KIND: Readonly<Record<string, string>> = { source: 'ceSource' };

/** Kind → old spelling → new name. */
export const CONFIG_RENAMES: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  nats: { servers: 'url', ...EVERY_KIND },
  kafka: { brokers: 'url', ...EVERY_KIND },
  webhook: EVERY_KIND,
  rabbitmq: EVERY_KIND,
  redis: EVERY_KIND,
  mqtt: EVERY_KIND,
};

/** An old spelling found under `publishers.<publisher>`; `conflict` when the new name is given too. */
export interface RenamedField {
  readonly publisher: string;
  readonly old: string;
  readonly name: string;
  readonly conflict: boolean;
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * `raw` with every old spelling under `publishers` moved to its new name (a copy: `raw` is not
 * changed), and the fields moved. A conflicting field is left where it is (the caller refuses it).
 * Anything that is not a config's shape is returned as it is, for the schema to reject.
 */
export function renamedConfigFields(raw: unknown): { config: unknown; renamed: RenamedField[] } {
  const renamed: RenamedField[] = [];
  if (!isRecord(raw) || !isRecord(raw['publishers'])) return { config: raw, renamed };
  const publishers: Record<string, unknown> = {};
  for (const [publisher, spec] of Object.entries(raw['publishers'])) {
    const renames =
      isRecord(spec) && typeof spec['kind'] === 'string' ? CONFIG_RENAMES[spec['kind']] : undefined;
    if (!isRecord(spec) || renames === undefined) {
      publishers[publisher] = spec;
      continue;
    }
    const copy: Record<string, unknown> = { ...spec };
    for (const [old, name] of Object.entries(renames)) {
      if (copy[old] === undefined) continue;
      const conflict = copy[name] !== undefined;
      renamed.push({ publisher, old, name, conflict });
      if (conflict) continue;
      copy[name] = copy[old];
      delete copy[old];
    }
    publishers[publisher] = copy;
  }
  return { config: { ...raw, publishers }, renamed };
}
