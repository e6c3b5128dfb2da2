import type { Registry } from 'prom-client';

/**
 * The value of one series in `registry`: the sample of `name` (a histogram's `_sum`, `_count` …
 * included) whose labels include `labels`; `missing` when there is none.
 */
export async function sample(
  registry: Registry,
  name: string,
  labels: Record<string, string> = {},
  missing = 0,
): Promise<number> {
  for (const metric of await registry.getMetricsAsJSON()) {
    for (const v of metric.values) {
      const sampleName = (v as { metricName?: string }).metricName ?? metric.name;
      if (sampleName !== name) continue;
      if (Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want)) return v.value;
    }
  }
  return missing;
}
