/** Broker addresses: `host:port` strings, and the list a client dials to bootstrap. */
import type { Broker } from '@platformatic/kafka';
import type { AddressMap } from './options.js';

/** `host:port` or `[v6]:port` as a broker address. */
export function parseAddress(broker: string): Broker {
  const at = broker.lastIndexOf(':');
  return { host: broker.slice(0, at).replace(/^\[(.*)\]$/, '$1'), port: Number(broker.slice(at + 1)) };
}

/** The configured bootstrap brokers, then every broker seen in metadata (mapped), each once. */
export function bootstrapAddresses(
  bootstrap: readonly Broker[],
  seen: Iterable<Broker> | undefined,
  map: AddressMap,
): Broker[] {
  const discovered = [...(seen ?? [])].map((b) => map(b));
  return uniqueAddresses([...bootstrap, ...discovered]);
}

/** The addresses, each `host:port` once, first seen first. */
export function uniqueAddresses(brokers: readonly Broker[]): Broker[] {
  const seen = new Set<string>();
  return brokers.filter((b) => {
    const key = `${b.host}:${b.port}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}
