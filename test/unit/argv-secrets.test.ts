/**
 * The relay warns about an address on its command line only when the address holds a secret:
 * a password, a query value named like one, or a NATS token (a user name alone, `token@host`).
 */
import { describe, expect, it } from 'vitest';
import { warnSecretsOnCommandLine } from '../../src/cli/argv-secrets.js';
import type { Logger } from '../../src/logger.js';

function warned(flag: string, value: string): string[] {
  const lines: string[] = [];
  const record = (obj: object, msg?: string): void => {
    lines.push(`${JSON.stringify(obj)} ${msg ?? ''}`);
  };
  const logger: Logger = { debug: () => {}, info: () => {}, warn: record, error: record };
  warnSecretsOnCommandLine({ [flag]: value }, logger);
  return lines;
}

describe('warnSecretsOnCommandLine', () => {
  it.each([
    ['--database-url', 'postgres://postgres@127.0.0.1:5432/test'],
    ['--database-url', 'postgres://127.0.0.1/test?sslmode=require&application_name=relay'],
    ['--database-url', 'postgres://app@db/test?sslkey=/etc/client.key'],
    ['--rabbitmq', 'amqp://guest@127.0.0.1:5672/vhost'],
    ['--mqtt', 'mqtt://device-7@broker:1883'],
    ['--redis', 'redis://127.0.0.1:6379'],
    ['--webhook', 'https://hooks.example.com/in?tenant=acme'],
    ['--nats', 'nats://127.0.0.1:4222,127.0.0.1:4223'],
  ])('%s %s: no secret, no warning', (flag, value) => {
    expect(warned(flag, value)).toEqual([]);
  });

  it.each([
    ['--database-url', 'postgres://postgres:hunter2@127.0.0.1:5432/test'],
    ['--database-url', 'postgres://postgres@127.0.0.1/test?password=hunter2'],
    ['--database-url', 'postgres://postgres@127.0.0.1/test?sslpassword=hunter2'],
    ['--rabbitmq', 'amqp://guest:guest@127.0.0.1:5672'],
    ['--redis', 'redis://:hunter2@127.0.0.1:6379'],
    ['--webhook', 'https://hooks.example.com/in?access_token=hunter2'],
    ['--webhook', 'https://hooks.example.com/in?sig=hunter2'],
    ['--webhook', 'https://hooks.example.com/in?key=hunter2'],
    ['--nats', 'nats://hunter2@127.0.0.1:4222'],
    ['--nats', '127.0.0.1:4222,user:hunter2@127.0.0.1:4223'],
    ['--nats', 'hunter2@127.0.0.1:4222'],
  ])('%s %s: warns once, naming the flag and never the value', (flag, value) => {
    const lines = warned(flag, value);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`${flag} carries a password or token`);
    expect(lines[0]).not.toContain('hunter2');
  });
});
