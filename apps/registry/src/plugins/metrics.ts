import type { Telemetry, TelemetryOptions } from '@tether/telemetry';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { createRegistryMetrics, type Metrics } from '../metrics.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The registry's counters and gauges (`/metrics`, OTLP); see metrics.ts. */
    metrics: Metrics;
  }
}

export interface MetricsOptions {
  /**
   * A Telemetry (its owner shuts it down), or the options of one made here and shut down with the app; default:
   * Prometheus only.
   */
  telemetry?: Telemetry | TelemetryOptions;
}

/** The metrics, every answer counted in registry_http_requests_total, and the telemetry shut down on close. */
export default fp(
  async (app: FastifyInstance, options: MetricsOptions) => {
    app.decorate('metrics', await createRegistryMetrics(options.telemetry));
    // Callback style: no promise per response.
    app.addHook('onResponse', (request, reply, done) => {
      app.metrics.inc('registry_http_requests_total', {
        method: request.method,
        route: request.routeOptions.url ?? 'unmatched',
        status: String(reply.statusCode),
      });
      done();
    });
    app.addHook('onClose', async () => app.metrics.close());
  },
  { name: 'metrics' },
);
