import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { RegistryStore } from '../store/types.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The store the routes use, counting operations in flight for drain(). */
    store: RegistryStore;
    /**
     * Resolves once no store operation is in flight (or after `timeoutMs`); true when drained. Fastify's close()
     * does not wait for handlers whose client went away, so whoever owns the store awaits this before closing it.
     */
    drain(timeoutMs: number): Promise<boolean>;
  }
}

export interface StoreOptions {
  store: RegistryStore;
  /** How often expired harness authorizations and browser grants are deleted; default 60 s. */
  pruneIntervalMs?: number;
}

/** The store (its owner opens and closes it), drain() for a graceful close, and the pruning of expired rows. */
export default fp(
  async (app: FastifyInstance, options: StoreOptions) => {
    const tracked = trackStore(options.store);
    app.decorate('store', tracked.store);
    app.decorate('drain', tracked.drain);
    // Expired authorizations are useless (consumption checks expiry); delete them now and then.
    let pruner: NodeJS.Timeout;
    app.addHook('onReady', async () => {
      pruner = setInterval(() => {
        app.store.pruneAuthorizations(app.now()).catch((err: unknown) => {
          app.log.warn({ err }, 'pruning expired authorizations failed');
        });
        app.store.pruneBrowserGrants(app.now()).catch((err: unknown) => {
          app.log.warn({ err }, 'pruning expired browser grants failed');
        });
      }, options.pruneIntervalMs ?? 60_000);
      pruner.unref();
    });
    app.addHook('preClose', async () => clearInterval(pruner));
  },
  { name: 'store', dependencies: ['config'] },
);

/** The store seen by the routes, counting operations in flight so that drain() can wait for them. */
function trackStore(store: RegistryStore) {
  let inFlight = 0;
  const idle: Array<() => void> = [];
  const wrappers = new Map<PropertyKey, { value: unknown; wrapper: unknown }>();
  const wrapped = new Proxy(store, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== 'function' || property === 'close') return value;
      const known = wrappers.get(property);
      if (known && known.value === value) return known.wrapper;
      const wrapper = async (...args: unknown[]) => {
        inFlight++;
        try {
          return await value.apply(target, args);
        } finally {
          if (--inFlight === 0) for (const wake of idle.splice(0)) wake();
        }
      };
      wrappers.set(property, { value, wrapper });
      return wrapper;
    },
  });
  // A handler's next store call follows the previous one within microtasks, so "idle" means idle across a
  // macrotask turn.
  const settledIdle = () => new Promise<boolean>((resolve) => setImmediate(() => resolve(inFlight === 0)));
  const drain = async (timeoutMs: number): Promise<boolean> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (inFlight === 0 && (await settledIdle())) return true;
      const left = deadline - Date.now();
      if (left <= 0) return false;
      const woke = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), left);
        idle.push(() => {
          clearTimeout(timer);
          resolve(true);
        });
      });
      if (!woke) return false;
    }
  };
  return { store: wrapped, drain };
}
