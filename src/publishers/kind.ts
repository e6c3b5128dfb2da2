/** The `broker` label: the kind of publisher, from a fixed set. */
export const PUBLISHER_KINDS = [
  'nats',
  'kafka',
  'rabbitmq',
  'redis',
  'mqtt',
  'webhook',
  'router',
  'custom',
] as const;
export type PublisherKind = (typeof PUBLISHER_KINDS)[number];

const KNOWN: ReadonlySet<string> = new Set(PUBLISHER_KINDS);

/** The publisher's `kind` when it declares one, else its name when that is a known kind, else `custom`. */
export function publisherKind(publisher: {
  readonly name: string;
  readonly kind?: string | undefined;
}): PublisherKind {
  const k = publisher.kind ?? publisher.name;
  return KNOWN.has(k) ? (k as PublisherKind) : 'custom';
}
