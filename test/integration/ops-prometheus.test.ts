/**
 * The Prometheus rules and the Grafana dashboard shipped in ops/: the rules pass promtool's
 * checker and linter and their unit tests (each alert fires, and stays silent, on synthetic
 * series); every dashboard query parses as PromQL; both use only the metric names of the
 * shared contract. promtool missing is a failure with the install hint, never a skip.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CDC_METRICS } from '../../src/cdc/stats.js';
import { promtool } from '../helpers/promtool.js';

const OPS = fileURLToPath(new URL('../../ops/', import.meta.url));
const RULES = join(OPS, 'prometheus/tx-outbox-rules.yml');
const RULES_TEST = join(OPS, 'prometheus/tx-outbox-rules.test.yml');
const DASHBOARD = join(OPS, 'grafana/tx-outbox-dashboard.json');

/** The metric names of the contract (docs/metrics.md): histograms also have _bucket/_sum/_count. */
const COUNTERS_AND_GAUGES = [
  'tx_outbox_events_published_total',
  'tx_outbox_events_retried_total',
  'tx_outbox_events_unavailable_total',
  'tx_outbox_events_dead_total',
  'tx_outbox_publish_attempts_total',
  'tx_outbox_publish_failures_total',
  'tx_outbox_partitions_held',
  'tx_outbox_lease_changes_total',
  'tx_outbox_relay_ready',
  'tx_outbox_pruned_rows_total',
  'tx_outbox_history_partitions',
  'tx_outbox_pending_events',
  'tx_outbox_oldest_pending_age_seconds',
  'tx_outbox_dead_events',
  'tx_outbox_partition_pending_events',
  'tx_outbox_partition_oldest_pending_age_seconds',
  'tx_outbox_partitions_unowned',
  'tx_outbox_relays_live',
  'tx_outbox_inbox_messages_total',
];
const HISTOGRAMS = [
  'tx_outbox_batch_size_events',
  'tx_outbox_claim_duration_seconds',
  'tx_outbox_publish_duration_seconds',
  'tx_outbox_record_duration_seconds',
  'tx_outbox_commit_to_publish_seconds',
  'tx_outbox_inbox_handler_duration_seconds',
  'tx_outbox_inbox_lag_seconds',
];
const KNOWN = new Set([
  ...COUNTERS_AND_GAUGES,
  // The CDC relay's, named where they are registered.
  ...Object.values(CDC_METRICS).map(([name]) => name),
  ...HISTOGRAMS.flatMap((h) => [`${h}_bucket`, `${h}_sum`, `${h}_count`]),
]);

/** The tx_outbox_* names an expression uses that the contract does not know. */
function unknownMetrics(expr: string): string[] {
  return [...expr.matchAll(/\btx_outbox_[a-z0-9_]+/g)].map((m) => m[0]).filter((name) => !KNOWN.has(name));
}

interface Target {
  readonly refId: string;
  readonly expr: string;
}
interface Panel {
  readonly id: number;
  readonly type: string;
  readonly title: string;
  readonly datasource?: { readonly type: string; readonly uid: string };
  readonly targets?: readonly Target[];
  readonly gridPos: { readonly h: number; readonly w: number; readonly x: number; readonly y: number };
}
interface Dashboard {
  readonly title: string;
  readonly uid: string;
  readonly panels: readonly Panel[];
  readonly templating: {
    readonly list: readonly { readonly name: string; readonly type: string; readonly query: unknown }[];
  };
}

/** Grafana's variables, replaced by what they stand for so promtool can parse the query. */
function asPromql(expr: string): string {
  return expr.replaceAll('$__rate_interval', '5m').replaceAll('$schema', '.*').replaceAll('$consumer', '.*');
}

describe('Prometheus rules (ops/prometheus)', () => {
  it('pass promtool check rules with every lint fatal', () => {
    const run = promtool(['check', 'rules', '--lint=all', '--lint-fatal', RULES]);
    expect(run.output).toMatch(/SUCCESS: \d+ rules found/);
    expect(run.status).toBe(0);
  });

  it('pass their unit tests: each alert fires, and stays silent, where it should', () => {
    const run = promtool(['test', 'rules', RULES_TEST]);
    expect(run.output).toContain('SUCCESS');
    expect(run.status).toBe(0);
  });

  it('cover the alerts the issue asks for, each with summary, description and runbook', () => {
    const text = readFileSync(RULES, 'utf8');
    const alerts = [...text.matchAll(/- alert: (\w+)/g)].map((m) => m[1]);
    for (const name of [
      'TxOutboxBacklogAging',
      'TxOutboxDeadEvents',
      'TxOutboxPartitionUnowned',
      'TxOutboxRelayNotReady',
      'TxOutboxInboxQuarantineGrowing',
      'TxOutboxPublishFailures',
    ]) {
      expect(alerts).toContain(name);
    }
    expect(text.match(/summary:/g)).toHaveLength(alerts.length);
    expect(text.match(/description:/g)).toHaveLength(alerts.length);
    const runbooks = [...text.matchAll(/runbook_url: "docs\/metrics\.md#(\w+)"/g)].map((m) => m[1]);
    expect(runbooks).toEqual(alerts.map((a) => a?.toLowerCase()));
    // Each runbook anchor is a heading of docs/metrics.md.
    const docs = readFileSync(fileURLToPath(new URL('../../docs/metrics.md', import.meta.url)), 'utf8');
    for (const alert of alerts) expect(docs).toContain(`### ${alert}\n`);
    // Every alert's test is in the unit-test file.
    const tests = readFileSync(RULES_TEST, 'utf8');
    for (const alert of alerts) expect(tests).toContain(`alertname: ${alert}\n`);
  });

  it('use only the metric names of the contract', () => {
    expect(unknownMetrics(readFileSync(RULES, 'utf8'))).toEqual([]);
    expect(unknownMetrics(readFileSync(RULES_TEST, 'utf8'))).toEqual([]);
  });
});

describe('Grafana dashboard (ops/grafana)', () => {
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as Dashboard;
  const queries = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p, target: t })));

  it('has unique panel ids, a datasource variable every query uses, and the asked-for sections', () => {
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const datasource = dashboard.templating.list.find((v) => v.type === 'datasource');
    expect(datasource).toMatchObject({ name: 'datasource', query: 'prometheus' });
    for (const p of dashboard.panels.filter((p) => p.type !== 'row')) {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax, not a JS template
      expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: '${datasource}' });
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
    }
    const rows = dashboard.panels.filter((p) => p.type === 'row').map((p) => p.title);
    expect(rows).toEqual([
      'Backlog (read from the database at scrape time)',
      'Throughput',
      'Latency',
      'Leases and readiness',
      'Inbox',
      'Bounded tables',
    ]);
    const all = queries.map((q) => q.target.expr).join('\n');
    expect(all).toContain(
      'histogram_quantile(0.99, sum by (schema, le) (rate(tx_outbox_commit_to_publish_seconds_bucket',
    );
    expect(all).toContain(
      'histogram_quantile(0.5, sum by (schema, le) (rate(tx_outbox_commit_to_publish_seconds_bucket',
    );
  });

  it('every query parses as PromQL (as recording rules checked by promtool)', () => {
    const rules = queries.map(({ panel, target }) => {
      const expr = asPromql(target.expr);
      expect(expr, `${panel.title}: a Grafana variable this test does not know`).not.toContain('$');
      return `      - record: txo_dashboard:panel_${panel.id}_${target.refId}\n        expr: ${JSON.stringify(expr)}\n`;
    });
    const file = join(mkdtempSync(join(tmpdir(), 'txo-dashboard-')), 'dashboard-rules.yml');
    writeFileSync(file, `groups:\n  - name: dashboard\n    rules:\n${rules.join('')}`);
    const run = promtool(['check', 'rules', file]);
    expect(run.output).toContain(`SUCCESS: ${rules.length} rules found`);
    expect(run.status).toBe(0);
  });

  it('uses only the metric names of the contract', () => {
    for (const { panel, target } of queries) expect(unknownMetrics(target.expr), panel.title).toEqual([]);
  });
});
