import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/cli/config.js';
import { metricsEndpoint, relayRegistry } from '../../src/cli/metrics-endpoint.js';

const file = 'relay.json';

describe('metrics endpoint of tx-outbox relay', () => {
  it('is off without a flag or a config field', () => {
    expect(metricsEndpoint({}, undefined)).toBeUndefined();
    expect(metricsEndpoint({}, { file, metrics: undefined })).toBeUndefined();
  });

  it('binds 127.0.0.1 unless told otherwise', () => {
    expect(metricsEndpoint({ metricsPort: 9464 }, undefined)).toEqual({
      port: 9464,
      host: '127.0.0.1',
      origin: '--metrics-port',
    });
  });

  it('takes the config file, the flags winning field by field', () => {
    const config = { file, metrics: { port: 9000, host: '0.0.0.0' } };
    expect(metricsEndpoint({}, config)).toEqual({
      port: 9000,
      host: '0.0.0.0',
      origin: 'config file relay.json: metrics.port',
    });
    expect(metricsEndpoint({ metricsPort: 9464 }, config)).toMatchObject({ port: 9464, host: '0.0.0.0' });
    expect(metricsEndpoint({ metricsHost: '::1' }, config)).toMatchObject({ port: 9000, host: '::1' });
  });

  it('refuses --metrics-host alone', () => {
    expect(() => metricsEndpoint({ metricsHost: '0.0.0.0' }, undefined)).toThrow(
      '--metrics-host needs --metrics-port <port>',
    );
  });

  it('a bad metrics.port in the config file names the file and the field', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'txo-metrics-config-'));
    const path = join(dir, 'relay.json');
    writeFileSync(
      path,
      JSON.stringify({ publishers: { a: { kind: 'redis', url: 'redis://x' } }, metrics: { port: 70000 } }),
    );
    await expect(loadConfig(path)).rejects.toThrow(`config file ${path}: metrics.port:`);
    writeFileSync(
      path,
      JSON.stringify({ publishers: { a: { kind: 'redis', url: 'redis://x' } }, metrics: { prot: 1 } }),
    );
    await expect(loadConfig(path)).rejects.toThrow(`config file ${path}: metrics`);
  });

  it('the registry has the process metrics, less the gauges promtool flags', async () => {
    const text = await relayRegistry().metrics();
    expect(text).toContain('process_cpu_seconds_total');
    expect(text).toContain('nodejs_active_handles ');
    expect(text).not.toContain('nodejs_active_handles_total');
  });
});
