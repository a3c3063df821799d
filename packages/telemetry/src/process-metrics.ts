import { performance } from 'node:perf_hooks';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';

/**
 * prom-client's default collectors on a registry of their own (never prom-client's global one): process
 * CPU, memory, file descriptors and start time (`process_*`), heap, handles, GC durations and event-loop lag
 * percentiles (`nodejs_*`), plus the event loop's utilization, which prom-client does not measure.
 * The lag histogram and the GC observer are process-wide and live as long as the process.
 */
export class ProcessMetrics {
  private readonly registry = new Registry();

  constructor() {
    collectDefaultMetrics({ register: this.registry });
    let last = performance.eventLoopUtilization();
    new Gauge({
      name: 'nodejs_eventloop_utilization',
      help: 'Fraction of the time the event loop was busy since the previous scrape (0 to 1).',
      registers: [this.registry],
      collect() {
        const now = performance.eventLoopUtilization();
        this.set(performance.eventLoopUtilization(now, last).utilization);
        last = now;
      },
    });
  }

  /** The collectors' current values in the Prometheus text format, rendered by prom-client. */
  metrics(): Promise<string> {
    return this.registry.metrics();
  }
}
