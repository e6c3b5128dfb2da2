import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { CliError } from '../../src/cli/common.js';
import { loadConfig, publisherSpecSchema } from '../../src/cli/config.js';
import { renamedConfigFields } from '../../src/cli/config-renames.js';

const dir = mkdtempSync(join(tmpdir(), 'txo-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
function configFile(config: unknown): string {
  const file = join(dir, `config-${n++}.json`);
  writeFileSync(file, JSON.stringify(config));
  return file;
}

let warn: MockInstance<typeof process.emitWarning>;
beforeEach(() => {
  warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
});
afterEach(() => warn.mockRestore());

describe('CLI config: one vocabulary', () => {
  it('reads url for nats (one or several) and kafka, without a warning', async () => {
    const file = configFile({
      publishers: {
        events: { kind: 'nats', url: ['nats://a:4222', 'nats://b:4222'], stream: 'ORDERS' },
        audit: { kind: 'kafka', url: '127.0.0.1:9092' },
      },
      default: 'events',
    });
    const config = await loadConfig(file);
    expect(config.publishers['events']).toEqual({
      kind: 'nats',
      url: ['nats://a:4222', 'nats://b:4222'],
      stream: 'ORDERS',
    });
    expect(config.publishers['audit']).toEqual({ kind: 'kafka', url: '127.0.0.1:9092' });
    expect(warn).not.toHaveBeenCalled();
  });

  it('still reads servers and brokers, warning once per field with the file and the field', async () => {
    const file = configFile({
      publishers: {
        events: { kind: 'nats', servers: 'nats://a:4222' },
        audit: { kind: 'kafka', brokers: ['127.0.0.1:9092'] },
      },
      default: 'events',
    });
    const config = await loadConfig(file);
    expect(config.publishers['events']).toEqual({ kind: 'nats', url: 'nats://a:4222' });
    expect(config.publishers['audit']).toEqual({ kind: 'kafka', url: ['127.0.0.1:9092'] });
    const messages = warn.mock.calls.map((c) => String(c[0]));
    expect(messages).toEqual([
      `config file ${file}: publishers.events.servers is deprecated, use "url" (the old spelling goes in the next minor version)`,
      `config file ${file}: publishers.audit.brokers is deprecated, use "url" (the old spelling goes in the next minor version)`,
    ]);
    expect(warn.mock.calls[0]![1]).toMatchObject({ type: 'DeprecationWarning' });
  });

  it('refuses both spellings, and a nats publisher without url, naming the file and the field', async () => {
    const both = configFile({
      publishers: { events: { kind: 'nats', url: 'nats://a', servers: 'nats://b' } },
    });
    await expect(loadConfig(both)).rejects.toThrow(
      new CliError(
        `config file ${both}: publishers.events.servers: is the deprecated spelling of "url", which is given too; keep "url" only`,
        2,
      ),
    );
    const none = configFile({ publishers: { events: { kind: 'nats', stream: 'S' } } });
    await expect(loadConfig(none)).rejects.toThrow(`config file ${none}: publishers.events.url:`);
    // `servers` is no key of a rabbitmq publisher: left to the schema, which refuses it.
    const foreign = configFile({
      publishers: { q: { kind: 'rabbitmq', url: 'amqp://h', servers: 'x' } },
    });
    await expect(loadConfig(foreign)).rejects.toThrow(/publishers\.q/);
  });

  it('the schema knows url only; renamedConfigFields leaves its input alone', () => {
    expect(publisherSpecSchema.safeParse({ kind: 'nats', servers: 'nats://a' }).success).toBe(false);
    expect(publisherSpecSchema.safeParse({ kind: 'kafka', url: ['h:1'] }).success).toBe(true);
    const raw = { publishers: { e: { kind: 'nats', servers: 'nats://a' } } };
    const { config, renamed } = renamedConfigFields(raw);
    expect(config).toEqual({ publishers: { e: { kind: 'nats', url: 'nats://a' } } });
    expect(renamed).toEqual([{ publisher: 'e', old: 'servers', name: 'url', conflict: false }]);
    expect(raw.publishers.e).toEqual({ kind: 'nats', servers: 'nats://a' });
    expect(renamedConfigFields('not a config')).toEqual({ config: 'not a config', renamed: [] });
  });
});

describe('CLI config: the CloudEvents source', () => {
  it('takes a URI-reference per publisher, of every kind', async () => {
    const file = configFile({
      publishers: {
        n: { kind: 'nats', url: 'nats://a', ceSource: 'https://orders.example.com' },
        k: { kind: 'kafka', url: 'h:1', ceSource: 'urn:example:orders' },
        r: { kind: 'rabbitmq', url: 'amqp://h', ceSource: '/orders' },
        s: { kind: 'redis', url: 'redis://h', ceSource: 'orders' },
        m: { kind: 'mqtt', url: 'mqtt://h', ceSource: 'orders' },
        w: { kind: 'webhook', url: 'https://h/x', secret: 's', ceSource: 'orders' },
      },
      routes: [{ match: { aggregateType: 'order' }, to: 'n' }],
      default: 'k',
    });
    const config = await loadConfig(file);
    expect(config.publishers['n']).toMatchObject({ ceSource: 'https://orders.example.com' });
    expect(config.publishers['w']).toMatchObject({ ceSource: 'orders' });
    expect(warn).not.toHaveBeenCalled();
  });

  it('still reads the earlier `source` of every kind as `ceSource`, warning per field, refusing both', async () => {
    const kinds = {
      n: { kind: 'nats', url: 'nats://a' },
      k: { kind: 'kafka', url: 'h:1' },
      r: { kind: 'rabbitmq', url: 'amqp://h' },
      s: { kind: 'redis', url: 'redis://h' },
      m: { kind: 'mqtt', url: 'mqtt://h' },
      w: { kind: 'webhook', url: 'https://h/x', secret: 's' },
    };
    const file = configFile({
      publishers: Object.fromEntries(Object.entries(kinds).map(([k, v]) => [k, { ...v, source: '/orders' }])),
      default: 'k',
    });
    const config = await loadConfig(file);
    for (const name of Object.keys(kinds)) {
      expect(config.publishers[name]).toMatchObject({ ceSource: '/orders' });
      expect(config.publishers[name]).not.toHaveProperty('source');
    }
    expect(warn.mock.calls.map((c) => String(c[0]))).toContain(
      `config file ${file}: publishers.w.source is deprecated, use "ceSource" (the old spelling goes in the next minor version)`,
    );
    expect(warn).toHaveBeenCalledTimes(6);
    const both = configFile({
      publishers: { e: { kind: 'redis', url: 'redis://h', source: '/a', ceSource: '/b' } },
    });
    await expect(loadConfig(both)).rejects.toThrow(
      `config file ${both}: publishers.e.source: is the deprecated spelling of "ceSource", which is given too`,
    );
  });

  it('refuses one that is not, naming the file and the field', async () => {
    const file = configFile({
      publishers: { e: { kind: 'redis', url: 'redis://h', ceSource: 'orders service' } },
    });
    await expect(loadConfig(file)).rejects.toThrow(
      `config file ${file}: publishers.e.ceSource: must be a URI-reference`,
    );
  });
});
