import type { MetricLabels } from './sink.js';

/** The sink's constant labels first, then the metric's own: the full label names of a metric. */
export function allLabelNames(constLabels: MetricLabels, labelNames: readonly string[]): string[] {
  const names = Object.keys(constLabels);
  for (const n of labelNames) if (!names.includes(n)) names.push(n);
  return names;
}

/** The series' labels: the constant ones with the given ones over them. */
export function withConst(constLabels: MetricLabels, labels: MetricLabels | undefined): MetricLabels {
  return labels === undefined ? constLabels : { ...constLabels, ...labels };
}
