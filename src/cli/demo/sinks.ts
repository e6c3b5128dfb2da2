/**
 * Where the relay publishes, and how the verifier receives: a signed local webhook
 * receiver, or a NATS JetStream stream of the demo's own read by an ordered consumer.
 */

import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger as PinoLogger } from 'pino';
import { errorMessage } from '../../errors.js';
import type { Publisher } from '../../publishers/contract.js';
import { verifyWebhook, webhookPublisher } from '../../publishers/webhook.js';
import { CliError } from '../common.js';
import { importNats } from '../publishers.js';
import type { Cleanup } from './lifecycle.js';
import type { Verifier } from './verifier.js';

export interface Sink {
  readonly publisher: Publisher;
  /** Event topic (NATS subject); undefined for the webhook, which has one URL. */
  readonly topic: string | undefined;
  readonly label: string;
}

export async function openSink(
  options: { readonly nats?: string },
  verifier: Verifier,
  cleanup: Cleanup,
  logger: PinoLogger,
): Promise<Sink> {
  return options.nats === undefined
    ? openWebhookSink(verifier, cleanup)
    : openNatsSink(options.nats, verifier, cleanup, logger);
}

async function openWebhookSink(verifier: Verifier, cleanup: Cleanup): Promise<Sink> {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  const server = createServer((req, res) => receiveWebhook(req, res, secret, verifier));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  cleanup.add('close the webhook receiver', async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}/events`;
  const publisher = webhookPublisher({ endpoints: url, secret });
  cleanup.add('close the webhook publisher', () => publisher.close());
  return { publisher, topic: undefined, label: `a signed webhook receiver at ${url}` };
}

function receiveWebhook(req: IncomingMessage, res: ServerResponse, secret: string, verifier: Verifier): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    if (!verifyWebhook({ secret, headers: req.headers, body })) {
      verifier.reject();
      res.writeHead(401).end('bad signature');
      return;
    }
    const get = (name: string): string | undefined => {
      const value = req.headers[name];
      return Array.isArray(value) ? value[0] : value;
    };
    const ok = verifier.recordEnvelope(get);
    res.writeHead(ok ? 204 : 400).end();
  });
}

async function openNatsSink(
  servers: string,
  verifier: Verifier,
  cleanup: Cleanup,
  logger: PinoLogger,
): Promise<Sink> {
  const { natsPublisher, ensureStream } = await importNats();
  const { connect } = await import('@nats-io/transport-node');
  const { jetstream, jetstreamManager } = await import('@nats-io/jetstream');
  const suffix = randomBytes(4).toString('hex');
  const stream = `TXO_DEMO_${suffix.toUpperCase()}`;
  const prefix = `txo.demo.${suffix}`;
  const nc = await connect({ servers: servers.split(','), name: 'tx-outbox-demo-consumer' }).catch(
    (error: unknown) => {
      throw new CliError(`cannot connect to NATS at ${servers}: ${errorMessage(error)}`, 1, { cause: error });
    },
  );
  cleanup.add('close the NATS consumer connection', () => nc.close());
  await ensureStream(nc, { name: stream, subjects: [`${prefix}.>`] });
  const jsm = await jetstreamManager(nc);
  cleanup.add('delete the demo stream', () => jsm.streams.delete(stream));
  // An ordered consumer: stream order, no acks; the stream's order per aggregate is the relay's.
  const messages = await (await jetstream(nc).consumers.get(stream)).consume();
  const consuming = (async () => {
    for await (const m of messages) verifier.recordEnvelope((name) => m.headers?.get(name) || undefined);
  })().catch((error: unknown) => logger.warn({ err: error }, 'demo consumer stopped'));
  cleanup.add('stop the NATS consumer', async () => {
    messages.stop();
    await consuming;
  });
  const publisher = natsPublisher({ servers: servers.split(','), stream, streamSubjects: [`${prefix}.>`] });
  cleanup.add('close the NATS publisher', () => publisher.close());
  return {
    publisher,
    topic: `${prefix}.order.placed`,
    label: `NATS JetStream stream ${stream} at ${servers}, read by an ordered consumer`,
  };
}
