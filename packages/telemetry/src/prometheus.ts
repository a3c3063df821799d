import type { Attributes } from '@opentelemetry/api';
import { DataPointType, type Histogram, type MetricData, type ResourceMetrics } from '@opentelemetry/sdk-metrics';

const NAME_INVALID = /[^a-zA-Z0-9_:]/g;

function metricName(name: string): string {
  const cleaned = name.replace(NAME_INVALID, '_');
  return /^[0-9]/.test(cleaned) ? `_${cleaned}` : cleaned;
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

function labels(attributes: Attributes, extra?: [string, string]): string {
  const pairs = Object.entries(attributes)
    .filter(([, value]) => value !== undefined)
    .map(([key, value]) => `${metricName(key)}="${escapeLabel(String(value))}"`);
  if (extra) pairs.push(`${extra[0]}="${escapeLabel(extra[1])}"`);
  return pairs.length === 0 ? '' : `{${pairs.join(',')}}`;
}

function number(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Number.POSITIVE_INFINITY) return '+Inf';
  if (value === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(value);
}

function renderMetric(metric: MetricData, out: string[]): void {
  const name = metricName(metric.descriptor.name);
  const help = metric.descriptor.description.replace(/\\/g, '\\\\').replace(/\n/g, '\\n');
  switch (metric.dataPointType) {
    case DataPointType.SUM:
    case DataPointType.GAUGE: {
      const type = metric.dataPointType === DataPointType.SUM && metric.isMonotonic ? 'counter' : 'gauge';
      if (help) out.push(`# HELP ${name} ${help}`);
      out.push(`# TYPE ${name} ${type}`);
      for (const point of metric.dataPoints) out.push(`${name}${labels(point.attributes)} ${number(point.value)}`);
      return;
    }
    case DataPointType.HISTOGRAM: {
      if (help) out.push(`# HELP ${name} ${help}`);
      out.push(`# TYPE ${name} histogram`);
      for (const point of metric.dataPoints) {
        const value: Histogram = point.value;
        let cumulative = 0;
        value.buckets.boundaries.forEach((bound, i) => {
          cumulative += value.buckets.counts[i] ?? 0;
          out.push(`${name}_bucket${labels(point.attributes, ['le', number(bound)])} ${cumulative}`);
        });
        out.push(`${name}_bucket${labels(point.attributes, ['le', '+Inf'])} ${value.count}`);
        out.push(`${name}_sum${labels(point.attributes)} ${number(value.sum ?? 0)}`);
        out.push(`${name}_count${labels(point.attributes)} ${value.count}`);
      }
      return;
    }
    default:
      return; // exponential histograms are not used here
  }
}

/** Renders collected metrics in the Prometheus text exposition format (version 0.0.4). */
export function renderPrometheus(resourceMetrics: ResourceMetrics): string {
  const out: string[] = [];
  for (const scope of resourceMetrics.scopeMetrics) for (const metric of scope.metrics) renderMetric(metric, out);
  return out.length === 0 ? '' : `${out.join('\n')}\n`;
}
