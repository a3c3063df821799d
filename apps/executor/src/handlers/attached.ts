import type { Handler, HandlerTable } from './types.js';

/**
 * Wraps every handler of `table` to run only while this connection still holds its session: like the
 * process methods, a filesystem or http call on a connection whose session was resumed elsewhere (or
 * ended) is refused with `session has been resumed by another connection`.
 */
export function whileAttached(table: HandlerTable): HandlerTable {
  const guarded: HandlerTable = {};
  for (const [method, handler] of Object.entries(table)) {
    const wrapped: Handler = (params, ctx) => {
      ctx.session();
      return handler(params, ctx);
    };
    guarded[method] = wrapped;
  }
  return guarded;
}
