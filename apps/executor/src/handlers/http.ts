import { decode, HttpRequestParams, Method } from '@tether/exec-protocol';
import type { HandlerTable } from './types.js';

export const httpHandlers: HandlerTable = {
  [Method.httpRequest]: (raw, ctx) => ctx.http.request(decode(HttpRequestParams, raw)),
};
