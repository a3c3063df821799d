import { decode, Method, TcpConnectParams } from '@tether/exec-protocol';
import type { TcpForwards } from '../tcp/forwards.js';
import { whileAttached } from './attached.js';
import type { HandlerTable } from './types.js';

/** `tcp/connect` (capability `tcpForward`) over the connection's forwards; the bytes travel as notifications. */
export function tcpHandlers(forwards: TcpForwards): HandlerTable {
  return whileAttached({
    [Method.tcpConnect]: (raw, ctx) => forwards.connect(decode(TcpConnectParams, raw), ctx.signal),
  });
}
