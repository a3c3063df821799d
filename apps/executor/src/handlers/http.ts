import { decode, HttpRequestParams, Method } from '@tether/exec-protocol';
import { whileAttached } from './attached.js';
import type { HandlerTable } from './types.js';

export const httpHandlers: HandlerTable = whileAttached({
  [Method.httpRequest]: (raw, ctx) => ctx.http.request(decode(HttpRequestParams, raw)),
});
