import type { Agent, ClientRequest, OutgoingHttpHeaders } from 'node:http';
import type { RequestOptions } from 'node:https';
import { type ProxySettings, proxyAuthorization, proxyFor, tunnelAgent } from './proxy.js';

export interface OutboundRequestOptions {
  readonly method: string;
  /** An object, or a flat [name, value, …] list that Node sends as it is (order and case kept). */
  readonly headers: OutgoingHttpHeaders | string[];
  readonly signal?: AbortSignal;
  /** The agent of a direct request (Node's global one when absent; `false` for a fresh connection). */
  readonly agent?: Agent | false;
  /** node:http's socket idle timeout ('timeout' event), in ms. */
  readonly timeout?: number;
}

function withHeader(
  headers: OutgoingHttpHeaders | string[],
  name: string,
  value: string,
): OutgoingHttpHeaders | string[] {
  if (Array.isArray(headers)) {
    for (let i = 0; i < headers.length; i += 2) if (headers[i]!.toLowerCase() === name) return headers;
    return [...headers, name, value];
  }
  if (Object.keys(headers).some((key) => key.toLowerCase() === name)) return headers;
  return { ...headers, [name]: value };
}

/**
 * node:http and node:https, loaded by the first request of each: node:https (with node:tls) is about 10 ms of
 * a process's start, node:http a few, which a harness command served by a connection master (no request at
 * all) or one that only talks to an http:// registry need not pay.
 */
function requestOf(secure: boolean): (...args: [URL, RequestOptions] | [RequestOptions]) => ClientRequest {
  const module = process.getBuiltinModule(secure ? 'node:https' : 'node:http');
  return (...args) => (args.length === 1 ? module.request(args[0]) : module.request(args[0], args[1]));
}

/**
 * An HTTP(S) request to `target`, through the proxy `settings` give for it (proxy.ts): direct; to an
 * http:// target, the request in absolute form to the proxy; to an https:// one, through a CONNECT tunnel.
 * The caller writes the body and handles 'response' and 'error' as with node:http. Asynchronous only because
 * a tunnel's agent loads on first use (proxy.ts).
 */
export async function outboundRequest(
  target: URL,
  options: OutboundRequestOptions,
  settings: ProxySettings,
): Promise<ClientRequest> {
  const proxy = proxyFor(target, settings);
  const secure = target.protocol === 'https:';
  const { method, signal } = options;
  const extra = {
    ...(signal ? { signal } : {}),
    ...(options.timeout !== undefined ? { timeout: options.timeout } : {}),
  };
  if (proxy === null) {
    const direct = { method, headers: options.headers as OutgoingHttpHeaders, ...extra };
    const agent = options.agent === undefined ? {} : { agent: options.agent };
    return requestOf(secure)(target, { ...direct, ...agent });
  }
  if (secure) {
    return requestOf(true)(target, {
      method,
      headers: options.headers as OutgoingHttpHeaders,
      agent: await tunnelAgent(proxy),
      ...extra,
    });
  }
  // Absolute form: the proxy reads the target from the request line; Host names the target too.
  const absolute = new URL(target.href);
  absolute.username = '';
  absolute.password = '';
  absolute.hash = '';
  let headers = withHeader(options.headers, 'host', target.host);
  const authorization = proxyAuthorization(proxy);
  if (authorization) headers = withHeader(headers, 'proxy-authorization', authorization);
  return requestOf(proxy.protocol === 'https:')({
    protocol: proxy.protocol,
    hostname: proxy.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: proxy.port || (proxy.protocol === 'https:' ? 443 : 80),
    path: absolute.href,
    method,
    headers: headers as OutgoingHttpHeaders,
    agent: false,
    ...extra,
  });
}
