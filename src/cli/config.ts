/**
 * `tx-outbox.config.{json,mjs,js,ts}`: publishers and routing rules for a relay
 * that feeds several brokers or destinations. Validated with zod; errors name
 * the field and the file.
 *
 *   {
 *     "publishers": {
 *       "events": { "kind": "nats", "url": "nats://127.0.0.1:4222", "stream": "ORDERS" },
 *       "audit":  { "kind": "kafka", "url": ["127.0.0.1:9092"] }
 *     },
 *     "routes": [ { "match": { "aggregateType": "audit" }, "to": "audit", "topic": "audit-log" } ],
 *     "default": "events",
 *     "metrics": { "port": 9464, "host": "127.0.0.1" }
 *   }
 *
 * `url` is where every publisher's broker is; a NATS or Kafka publisher takes one or several
 * (a list, or a comma-separated string); `ceSource` is the CloudEvents source it stamps. The
 * earlier `servers` (NATS), `brokers` (Kafka) and `source` are still read, with a deprecation
 * warning naming the file and the field, until the next minor version.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { ceSourceOf } from '../envelope/ce-source.js';
import { CliError } from './common.js';
import { type RenamedField, renamedConfigFields } from './config-renames.js';

const nonEmpty = z.string().min(1);
const list = z.union([nonEmpty, z.array(nonEmpty).min(1)]);
/** The CloudEvents `source` the publisher stamps (`ceSource`): a URI-reference. */
const ceSource = nonEmpty
  .refine(isUriReference, {
    message: "must be a URI-reference such as 'https://orders.example.com' or 'urn:example:orders'",
  })
  .optional();

function isUriReference(value: string): boolean {
  try {
    ceSourceOf(value);
    return true;
  } catch {
    return false;
  }
}

export const publisherSpecSchema = z.discriminatedUnion('kind', [
  z
    .object({
      kind: z.literal('nats'),
      url: list,
      stream: nonEmpty.optional(),
      streamSubjects: z.array(nonEmpty).min(1).optional(),
      ceSource,
    })
    .strict(),
  z
    .object({
      kind: z.literal('webhook'),
      url: z.url(),
      secret: nonEmpty.optional(),
      /** A file holding the secret; relative to the config file. */
      secretFile: nonEmpty.optional(),
      ceSource,
    })
    .strict()
    .refine((spec) => spec.secret === undefined || spec.secretFile === undefined, {
      message: 'give "secret" or "secretFile", not both',
      path: ['secretFile'],
    }),
  z.object({ kind: z.literal('kafka'), url: list, clientId: nonEmpty.optional(), ceSource }).strict(),
  z.object({ kind: z.literal('rabbitmq'), url: nonEmpty, exchange: nonEmpty.optional(), ceSource }).strict(),
  z.object({ kind: z.literal('redis'), url: nonEmpty, ceSource }).strict(),
  z.object({ kind: z.literal('mqtt'), url: nonEmpty, ceSource }).strict(),
]);

export type PublisherSpec = z.infer<typeof publisherSpecSchema>;

const routeSchema = z
  .object({
    match: z
      .object({ type: nonEmpty.optional(), aggregateType: nonEmpty.optional(), topic: nonEmpty.optional() })
      .strict(),
    to: nonEmpty,
    topic: nonEmpty.optional(),
  })
  .strict();

/** `tx-outbox relay --metrics-port/--metrics-host` in the file; the flags win. */
const metricsSchema = z
  .object({ port: z.number().int().min(0).max(65_535), host: nonEmpty.optional() })
  .strict();

export const configSchema = z
  .object({
    publishers: z.record(nonEmpty, publisherSpecSchema),
    routes: z.array(routeSchema).default([]),
    default: nonEmpty.optional(),
    // The delivery history (createRelay({ history })); `tx-outbox relay --history…` flags win.
    history: z
      .object({
        retentionDays: z.number().int().min(1).max(3650).optional(),
        payloads: z.boolean().optional(),
      })
      .strict()
      .optional(),
    metrics: metricsSchema.optional(),
  })
  .strict()
  .superRefine((config, ctx) => {
    const names = new Set(Object.keys(config.publishers));
    if (names.size === 0)
      ctx.addIssue({ code: 'custom', path: ['publishers'], message: 'name at least one publisher' });
    config.routes.forEach((r, i) => {
      if (!names.has(r.to)) {
        ctx.addIssue({ code: 'custom', path: ['routes', i, 'to'], message: `no publisher named "${r.to}"` });
      }
    });
    if (config.default !== undefined && !names.has(config.default)) {
      ctx.addIssue({ code: 'custom', path: ['default'], message: `no publisher named "${config.default}"` });
    }
    if (config.routes.length === 0 && config.default === undefined && names.size > 1) {
      ctx.addIssue({
        code: 'custom',
        path: ['default'],
        message: 'with several publishers and no routes, say which is the default',
      });
    }
  });

export type RelayConfig = z.infer<typeof configSchema>;

export const CONFIG_FILES = [
  'tx-outbox.config.json',
  'tx-outbox.config.mjs',
  'tx-outbox.config.js',
  'tx-outbox.config.ts',
];

/** Finds the config file: the given path, else the first of CONFIG_FILES in the working directory. */
export function findConfig(path: string | undefined): string | undefined {
  if (path !== undefined) return resolve(path);
  return CONFIG_FILES.map((f) => resolve(f)).find((f) => existsSync(f));
}

export async function loadConfig(file: string): Promise<RelayConfig> {
  if (!existsSync(file)) throw new CliError(`config file ${file} does not exist`, 2);
  let raw: unknown;
  const ext = extname(file);
  try {
    if (ext === '.json') raw = JSON.parse(readFileSync(file, 'utf8'));
    else {
      const mod = (await import(pathToFileURL(file).href)) as { default?: unknown };
      raw = mod.default ?? mod;
    }
  } catch (error) {
    const hint =
      ext === '.ts'
        ? ' (a .ts config needs a Node.js that strips types, 22.18 or later, or use .json/.mjs)'
        : '';
    throw new CliError(`cannot read config file ${file}: ${(error as Error).message}${hint}`, 2, {
      cause: error,
    });
  }
  let renamed: RenamedField[];
  ({ config: raw, renamed } = renamedConfigFields(raw));
  for (const r of renamed) {
    const where = `publishers.${r.publisher}`;
    if (r.conflict) {
      throw new CliError(
        `config file ${file}: ${where}.${r.old}: is the deprecated spelling of "${r.name}", which is given too; keep "${r.name}" only`,
        2,
      );
    }
    process.emitWarning(
      `config file ${file}: ${where}.${r.old} is deprecated, use "${r.name}" (the old spelling goes in the next minor version)`,
      { type: 'DeprecationWarning', code: 'TXO_DEPRECATED_OPTION' },
    );
  }
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.length > 0 ? issue.path.join('.') : '(top level)';
    throw new CliError(`config file ${file}: ${where}: ${issue.message}`, 2);
  }
  for (const spec of Object.values(parsed.data.publishers)) {
    if (spec.kind === 'webhook' && spec.secretFile !== undefined) {
      spec.secretFile = resolve(dirname(file), spec.secretFile);
    }
  }
  return parsed.data;
}
