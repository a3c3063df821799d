import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';

/** What every other plugin and route reads: the relay nodes, the lifetimes, the clock. */
export interface ResolvedConfig {
  relayUrls: string[];
  authorizationTtlMs: number;
  relayUrlTtlMs: number;
  relayPresenceTtlMs: number;
  metricsCacheMs: number;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The registry's settings, defaults filled in. */
    config: ResolvedConfig;
    /** Clock, epoch ms (tests pass their own). */
    now: () => number;
  }
}

export interface ConfigOptions {
  config: ResolvedConfig;
  now: () => number;
}

/** The settings and the clock, decorated once on the root so that every plugin and route reads the same. */
export default fp(
  async (app: FastifyInstance, options: ConfigOptions) => {
    app.decorate('config', options.config);
    app.decorate('now', options.now);
  },
  { name: 'config' },
);
