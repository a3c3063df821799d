import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { ProxySettings } from './proxy.js';
import { outboundRequest } from './request.js';

/**
 * A `fetch` for JSON APIs over node:http(s) through `settings`' proxies: a method, string headers, a string or
 * byte body and a signal; no redirects are followed (an answer is returned as it is, like `redirect: 'manual'`),
 * no connection is kept. A failure to connect rejects with a TypeError whose `cause` is the OS error, as
 * Node's fetch does. For what Node 20's fetch cannot do: go through a proxy.
 */
export function outboundFetch(settings: ProxySettings): typeof fetch {
  return (input, init = {}) =>
    new Promise<Response>((resolve, reject) => {
      const target = new URL(input instanceof Request ? input.url : String(input));
      const headers: Record<string, string> = {};
      new Headers(init.headers).forEach((value, name) => {
        headers[name] = value;
      });
      const body = init.body;
      if (body !== undefined && body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
        reject(new TypeError('outboundFetch takes a string or bytes body'));
        return;
      }
      const payload = body === undefined || body === null ? null : Buffer.from(body);
      if (payload) headers['content-length'] = String(payload.byteLength);
      const signal = init.signal ?? undefined;
      const request = outboundRequest(
        target,
        { method: init.method ?? 'GET', headers, agent: false, ...(signal ? { signal } : {}) },
        settings,
      );
      request.then((req) => {
        req.once('error', (err) =>
          reject(signal?.aborted ? signal.reason : new TypeError('fetch failed', { cause: err })),
        );
        req.once('response', (res: IncomingMessage) => {
          const answerHeaders = new Headers();
          for (let i = 0; i + 1 < res.rawHeaders.length; i += 2)
            answerHeaders.append(res.rawHeaders[i]!, res.rawHeaders[i + 1]!);
          const status = res.statusCode ?? 502;
          const noBody = status === 204 || status === 205 || status === 304 || init.method === 'HEAD';
          if (noBody) res.resume();
          resolve(
            new Response(noBody ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>), {
              status,
              statusText: res.statusMessage ?? '',
              headers: answerHeaders,
            }),
          );
        });
        req.end(payload ?? undefined);
      }, reject);
    });
}
