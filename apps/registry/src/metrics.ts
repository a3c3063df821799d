/** A tiny Prometheus registry: counters with labels, rendered in the text exposition format 0.0.4. */
export class Metrics {
  readonly #counters = new Map<string, { help: string; values: Map<string, number> }>();

  constructor(definitions: Record<string, string>) {
    for (const [name, help] of Object.entries(definitions)) this.#counters.set(name, { help, values: new Map() });
  }

  inc(name: string, labels: Record<string, string> = {}, by = 1): void {
    const counter = this.#counters.get(name);
    if (!counter) throw new Error(`unknown metric ${name}`);
    let key = '';
    for (const k in labels) {
      const v = labels[k] as string;
      const escaped = /[\\"\n]/.test(v) ? v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n') : v;
      key += `${key ? ',' : ''}${k}="${escaped}"`;
    }
    counter.values.set(key, (counter.values.get(key) ?? 0) + by);
  }

  render(gauges: Record<string, { help: string; value: number }> = {}): string {
    const lines: string[] = [];
    for (const [name, { help, values }] of this.#counters) {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
      for (const [labels, value] of values) lines.push(`${name}${labels ? `{${labels}}` : ''} ${value}`);
    }
    for (const [name, { help, value }] of Object.entries(gauges)) {
      lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name} ${value}`);
    }
    return `${lines.join('\n')}\n`;
  }
}

export function createRegistryMetrics(): Metrics {
  return new Metrics({
    registry_http_requests_total: 'HTTP requests answered, by method, route and status.',
    registry_registrations_total: 'Executor registrations accepted.',
    registry_bundles_total: 'Harness rendezvous bundles issued.',
    registry_validations_total: 'Harness key validations, by result.',
  });
}
