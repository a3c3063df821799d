import type { Session } from '../session-registry.js';

export interface RequestContext {
  /** The session this connection is attached to; throws the takeover error if it was resumed elsewhere. */
  session(): Session;
  /** Aborted when the connection ends or loses its session. */
  signal: AbortSignal;
}

export type Handler = (params: unknown, ctx: RequestContext) => Promise<unknown> | unknown;
export type HandlerTable = Record<string, Handler>;
