import { Type } from '@sinclair/typebox';
import { PROMETHEUS_CONTENT_TYPE } from '@tether/telemetry';
import type { FastifyInstance } from 'fastify';
import { errorBody } from '../errors.js';
import { ErrorResponse, StatusResponse } from '../schemas.js';

/** `/livez` (process up), `/readyz` (store reachable) and `/metrics` (Prometheus text, with the process metrics). */
export async function healthRoutes(app: FastifyInstance) {
  app.get('/livez', { schema: { response: { 200: StatusResponse } } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { response: { 200: StatusResponse, 503: ErrorResponse } } }, async (request, reply) => {
    try {
      await app.store.ping();
      return { status: 'ok' };
    } catch (err) {
      request.log.warn({ err }, 'store unreachable');
      return reply.code(503).send(errorBody('store_unavailable'));
    }
  });
  // Read when the metrics are collected: by a scrape here, or by an OTLP export.
  const environments = sharedScan(
    async () => {
      const all = await app.store.listEnvironments();
      return { known: all.length, registered: all.filter((e) => e.registration !== null).length };
    },
    app.config.metricsCacheMs,
    app.now,
  );
  app.metrics.observeGauges(async () => {
    const [counts, live] = await Promise.all([environments(), app.liveRelayNodes()]);
    return { environments: counts.known, registeredEnvironments: counts.registered, relayNodesRoutable: live.length };
  });
  app.get('/metrics', { schema: { response: { 200: Type.String() } } }, async (_request, reply) => {
    const text = await app.metrics.text();
    reply.type(PROMETHEUS_CONTENT_TYPE);
    return text;
  });
}

/**
 * `/metrics` is unauthenticated, and counting environments scans them all: reuse a scan for `ttlMs`, and let
 * scrapes that arrive while one is running share it, so a flood of scrapes costs at most one scan per `ttlMs`.
 */
export function sharedScan<T>(scan: () => Promise<T>, ttlMs: number, now: () => number): () => Promise<T> {
  let last: { value: T; at: number } | null = null;
  let running: Promise<T> | null = null;
  return () => {
    if (last && now() - last.at < ttlMs) return Promise.resolve(last.value);
    running ??= scan()
      .then((value) => {
        last = { value, at: now() };
        return value;
      })
      .finally(() => {
        running = null;
      });
    return running;
  };
}
