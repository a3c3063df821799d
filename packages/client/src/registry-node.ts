/** The registry's `/connect` from Node: over node:http(s) through the configured proxies (`nodeRoute`). */
import type { IncomingMessage } from 'node:http';
import { describeProxy, outboundRequest, type ProxySettings } from '@tether/outbound';
import { TetherError } from './errors.js';
import { proxyForCredentials, proxySettings } from './proxy.js';
import { type Answer, bundleFetcher, fetchPost, type Post, type RegistryRoute } from './registry.js';

/** A `/connect` answer is a few hundred bytes; anything past this is not one. */
const MAX_ANSWER_BYTES = 256 * 1024;

/**
 * One POST over node:http(s), no redirects followed, no connection kept. Not `fetch`: Node 20's fetch
 * (undici) loads and compiles its WebAssembly HTTP parser on first use, which costs a short-lived CLI like
 * `harness cp` about 50 ms of start and ~100 ms at exit, where V8 finishes optimising that WebAssembly.
 */
const nodePost =
  (settings: ProxySettings): Post =>
  (url, headers, body, signal) =>
    new Promise<Answer>((resolve, reject) => {
      const payload = Buffer.from(body);
      outboundRequest(
        new URL(url),
        { method: 'POST', agent: false, headers: { ...headers, 'content-length': String(payload.byteLength) }, signal },
        settings,
      ).then((req) => {
        req.once('error', reject);
        req.once('response', (res: IncomingMessage) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (chunk: Buffer) => {
            size += chunk.byteLength;
            if (size > MAX_ANSWER_BYTES) {
              res.destroy();
              reject(
                new TetherError('registry', `the registry's answer to /connect is over ${MAX_ANSWER_BYTES} bytes`),
              );
              return;
            }
            chunks.push(chunk);
          });
          res.once('error', reject);
          res.once('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
        });
        req.end(payload);
      }, reject);
    });

/**
 * Node's route: the proxies of the options, else of the environment (a plain http:// registry through a proxy
 * needs the same consent as a remote one); node:http(s), or the options' `fetch` when given.
 */
export const nodeRoute: RegistryRoute = (options, base) => {
  const proxies = proxySettings(options);
  const proxy = proxyForCredentials(new URL(base), proxies, options.allowInsecureRegistry === true, {
    target: `send the API key to the plain http:// registry at ${new URL(base).host}`,
    secret: 'it',
    secure: 'https://',
  });
  return {
    post: options.fetch ? fetchPost(options.fetch) : nodePost(proxies),
    via: proxy ? ` through the proxy ${describeProxy(proxy)}` : '',
  };
};

/**
 * Fetches a fresh rendezvous bundle for this harness key, from Node (`nodeRoute`). Timeouts and unreachable
 * registries are retried (up to 4 times within the overall deadline); answers are not. Redirects are never
 * followed.
 */
export const fetchBundle = bundleFetcher(nodeRoute);
