import type { IncomingMessage } from 'node:http';
import {
  decodeBase64Codex,
  type HttpBodyDeltaNotification,
  type HttpHeader,
  type HttpRequestParams,
  type HttpRequestResult,
  RpcError,
} from '@tether/exec-protocol';
import { DIRECT, outboundRequest, type ProxySettings } from '@tether/outbound';

/** Redirects followed before giving up (reqwest's default policy, which Codex uses). */
export const MAX_REDIRECTS = 10;
/** Streamed bodies in flight per connection; one more is refused (-32600). */
export const MAX_ACTIVE_STREAMS = 256;
/** Largest body returned in one `http/request` result; bigger bodies must be streamed. */
export const DEFAULT_MAX_BUFFERED_BODY_BYTES = 256 * 1024 * 1024;

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// RFC 9110 field-value: visible ASCII, obs-text, space and tab; no CR, LF, NUL or DEL.
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const VISIBLE_ASCII = /^[\t\x20-\x7e]*$/;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

export interface HttpRequestsOptions {
  /** Sends one `http/request/bodyDelta`; false when the connection is above its high-water mark. */
  sendDelta: (params: HttpBodyDeltaNotification) => boolean;
  /** Resolves when the connection can take more (after `sendDelta` returned false). */
  writable: () => Promise<void>;
  maxBufferedBodyBytes?: number;
  maxActiveStreams?: number;
  /** The proxies requests go through (HTTPS_PROXY/HTTP_PROXY/NO_PROXY, as Codex's reqwest); default none. */
  proxy?: ProxySettings;
  /** The executor's own environment, where a header's `valueEnvVar` is looked up; default `process.env`. */
  env?: NodeJS.ProcessEnv;
}

interface Prepared {
  url: URL;
  method: string;
  headers: HttpHeader[];
  body: Buffer | null;
}

type Outcome = { kind: 'response'; response: IncomingMessage; url: URL } | { kind: 'error'; message: string };

/**
 * `http/request` for one connection: validation with Codex's messages, redirects, a whole-request
 * deadline, buffered or streamed bodies, at most one active stream per `requestId`. `closeAll()`
 * (connection end) aborts everything in flight; no notification is sent after it.
 */
export class HttpRequests {
  private readonly streams = new Set<string>();
  private readonly inflight = new Set<AbortController>();
  private closed = false;
  private readonly maxBufferedBodyBytes: number;
  private readonly maxActiveStreams: number;
  private readonly proxy: ProxySettings;
  private readonly env: NodeJS.ProcessEnv;

  constructor(private readonly options: HttpRequestsOptions) {
    this.maxBufferedBodyBytes = options.maxBufferedBodyBytes ?? DEFAULT_MAX_BUFFERED_BODY_BYTES;
    this.maxActiveStreams = options.maxActiveStreams ?? MAX_ACTIVE_STREAMS;
    this.proxy = options.proxy ?? DIRECT;
    this.env = options.env ?? process.env;
  }

  get activeStreams(): number {
    return this.streams.size;
  }

  async request(params: HttpRequestParams): Promise<HttpRequestResult> {
    const prepared = prepare(params, this.env);
    const streaming = params.streamResponse ?? false;
    if (streaming) {
      if (this.streams.has(params.requestId)) {
        throw RpcError.invalidParams(`http/request streamResponse requestId \`${params.requestId}\` is already active`);
      }
      if (this.streams.size >= this.maxActiveStreams) {
        throw RpcError.invalidRequest(
          `at most ${this.maxActiveStreams} http/request streams may be active per connection`,
        );
      }
      this.streams.add(params.requestId);
    }
    const controller = new AbortController();
    this.inflight.add(controller);
    const timer =
      params.timeoutMs === undefined || params.timeoutMs === null
        ? null
        : setTimeout(() => controller.abort(new Error('timeout')), Math.min(params.timeoutMs, 2 ** 31 - 1));
    const finish = () => {
      if (timer) clearTimeout(timer);
      this.inflight.delete(controller);
      if (streaming) this.streams.delete(params.requestId);
    };
    if (this.closed) controller.abort(new Error('connection closed'));
    let outcome: Outcome;
    try {
      outcome = await send(prepared, params.redirectPolicy ?? 'follow', this.proxy, controller.signal);
    } catch (err) {
      finish();
      throw err;
    }
    if (outcome.kind === 'error') {
      finish();
      throw RpcError.internal(`http/request failed: ${outcome.message}`);
    }
    const { response } = outcome;
    const head = { status: response.statusCode ?? 0, headers: responseHeaders(response) };
    if (!streaming) {
      try {
        return { ...head, bodyBase64: (await this.collect(response, controller.signal)).toString('base64') };
      } catch (err) {
        throw RpcError.internal(`http/request failed: ${(err as Error).message}`);
      } finally {
        finish();
      }
    }
    // Deltas start after the result is on the wire: the dispatcher sends it once this returns.
    response.pause();
    setImmediate(() => {
      void this.pump(params.requestId, response, controller.signal).finally(finish);
    });
    return { ...head, bodyBase64: '' };
  }

  private collect(response: IncomingMessage, signal: AbortSignal): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let total = 0;
      const fail = (message: string) => {
        response.destroy();
        reject(new Error(message));
      };
      if (signal.aborted) return fail('error decoding response body');
      signal.addEventListener('abort', () => fail('error decoding response body'), { once: true });
      response.on('data', (chunk: Buffer) => {
        total += chunk.length;
        if (total > this.maxBufferedBodyBytes) {
          fail(`response body exceeds ${this.maxBufferedBodyBytes} bytes; use streamResponse`);
          return;
        }
        chunks.push(chunk);
      });
      response.on('end', () => resolve(Buffer.concat(chunks, total)));
      response.on('error', () => fail('error decoding response body'));
    });
  }

  /** Streams the body as deltas with seq 1, 2, …; the last one has `done` (and `error` on failure). */
  private async pump(requestId: string, response: IncomingMessage, signal: AbortSignal): Promise<void> {
    let seq = 0;
    const send = (deltaBase64: string, done: boolean, error: string | null): boolean => {
      if (this.closed) return true;
      seq += 1;
      return this.options.sendDelta({ requestId, seq, deltaBase64, done, error });
    };
    const abort = () => response.destroy(new Error('aborted'));
    signal.addEventListener('abort', abort, { once: true });
    try {
      for await (const chunk of response as AsyncIterable<Buffer>) {
        if (this.closed) return;
        if (!send(chunk.toString('base64'), false, null)) await this.options.writable();
      }
      send('', true, null);
    } catch {
      send('', true, 'error decoding response body');
    } finally {
      signal.removeEventListener('abort', abort);
      response.destroy();
    }
  }

  /** The connection ended: abort every request; nothing more is sent. */
  closeAll(): void {
    this.closed = true;
    for (const controller of this.inflight) controller.abort(new Error('connection closed'));
    this.inflight.clear();
    this.streams.clear();
  }
}

function prepare(params: HttpRequestParams, env: NodeJS.ProcessEnv): Prepared {
  let url: URL;
  try {
    url = new URL(params.url);
  } catch {
    const reason = /^[A-Za-z][A-Za-z0-9+.-]*:/.test(params.url) ? 'invalid URL' : 'relative URL without a base';
    throw RpcError.invalidParams(`http/request url is invalid: ${reason}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw RpcError.invalidParams(`http/request only supports http and https URLs, got ${url.protocol.slice(0, -1)}`);
  }
  if (!TOKEN.test(params.method)) throw RpcError.invalidParams('http/request method is invalid: invalid HTTP method');
  // One header at a time, as Codex checks them: its name, its variable, then its value.
  const headers = (params.headers ?? []).map(({ name, value, valueEnvVar }) => {
    if (!TOKEN.test(name))
      throw RpcError.invalidParams('http/request header name is invalid: invalid HTTP header name');
    const full = valueEnvVar === undefined || valueEnvVar === null ? value : value + envValue(env, name, valueEnvVar);
    // Values go out as their UTF-8 bytes (Node writes header strings as latin1, one byte per char).
    const bytes = Buffer.from(full, 'utf8').toString('latin1');
    // The value is not quoted: it may hold the variable's secret.
    if (!FIELD_VALUE.test(bytes)) {
      throw RpcError.invalidParams(`http/request header value is invalid for ${name}: failed to parse header value`);
    }
    return { name, value: bytes };
  });
  let body: Buffer | null = null;
  if (params.bodyBase64 !== undefined && params.bodyBase64 !== null) {
    try {
      body = decodeBase64Codex(params.bodyBase64);
    } catch (err) {
      throw RpcError.invalidParams((err as Error).message);
    }
  }
  return { url, method: params.method, headers, body };
}

/**
 * The value of the executor's variable `variable` for header `header` (`httpHeaderEnvVars`), with Codex's errors
 * when it is unset or empty; never the value in a message. A name Rust's `env::var` cannot look up (empty, with
 * `=` or NUL) is unset: Node would read `A\0B` as `A`.
 */
function envValue(env: NodeJS.ProcessEnv, header: string, variable: string): string {
  const value = /^[^=\0]+$/.test(variable) && Object.hasOwn(env, variable) ? env[variable] : undefined;
  if (typeof value !== 'string') {
    throw RpcError.invalidParams(`http/request header ${header} requires executor environment variable ${variable}`);
  }
  if (value === '') {
    throw RpcError.invalidParams(
      `http/request header ${header} requires a non-empty executor environment variable ${variable}`,
    );
  }
  return value;
}

function responseHeaders(response: IncomingMessage): HttpHeader[] {
  const headers: HttpHeader[] = [];
  const raw = response.rawHeaders;
  // Codex keeps only values that are visible ASCII (what `HeaderValue::to_str` accepts) and leaves the
  // others out; Node hands us each byte as one latin1 char, so the same test applies.
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (VISIBLE_ASCII.test(raw[i + 1]!)) headers.push({ name: raw[i]!.toLowerCase(), value: raw[i + 1]! });
  }
  return headers;
}

function sendOnce(prepared: Prepared, proxy: ProxySettings, signal: AbortSignal): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    // Raw headers keep the caller's order and repeats; Node then adds none of its defaults, so the
    // ones reqwest (Codex's client) adds come last: accept, host, content-length.
    const flat: string[] = [];
    // Names go out in lower case, as hyper (under reqwest) writes them.
    for (const header of prepared.headers) flat.push(header.name.toLowerCase(), header.value);
    const has = (name: string) => prepared.headers.some((h) => h.name.toLowerCase() === name);
    if (!has('accept')) flat.push('accept', '*/*');
    if (!has('host')) flat.push('host', prepared.url.host);
    if (prepared.body !== null && !has('content-length') && !has('transfer-encoding')) {
      flat.push('content-length', String(prepared.body.length));
    }
    outboundRequest(prepared.url, { method: prepared.method, headers: flat, signal }, proxy).then((request) => {
      request.once('response', resolve);
      request.once('error', reject);
      request.end(prepared.body ?? undefined);
    }, reject);
  });
}

/** Sends the request, following redirects unless `policy` is `stop`. */
async function send(
  prepared: Prepared,
  policy: 'follow' | 'stop',
  proxy: ProxySettings,
  signal: AbortSignal,
): Promise<Outcome> {
  let current = prepared;
  for (let redirects = 0; ; redirects++) {
    let response: IncomingMessage;
    try {
      response = await sendOnce(current, proxy, signal);
    } catch {
      return { kind: 'error', message: `error sending request for url (${current.url.href})` };
    }
    const status = response.statusCode ?? 0;
    const location = response.headers.location;
    if (policy === 'stop' || !REDIRECT_STATUSES.has(status) || location === undefined) {
      return { kind: 'response', response, url: current.url };
    }
    response.resume(); // discard the redirect's body
    if (redirects >= MAX_REDIRECTS) {
      return { kind: 'error', message: `error following redirect for url (${current.url.href})` };
    }
    let next: URL;
    try {
      next = new URL(location, current.url);
    } catch {
      return { kind: 'response', response, url: current.url };
    }
    current = redirectedRequest(current, next, status);
  }
}

/** 301/302/303 turn a body-carrying request into a GET without body; 307/308 repeat it as it was. */
function redirectedRequest(previous: Prepared, next: URL, status: number): Prepared {
  const toGet = status === 303 ? previous.method !== 'HEAD' : status <= 302 && previous.method === 'POST';
  const dropped = new Set(['referer', 'host']);
  if (toGet)
    for (const name of ['content-length', 'content-type', 'content-encoding', 'transfer-encoding']) dropped.add(name);
  if (next.host !== previous.url.host)
    for (const name of ['authorization', 'cookie', 'proxy-authorization']) dropped.add(name);
  const headers = previous.headers.filter((h) => !dropped.has(h.name.toLowerCase()));
  headers.push({ name: 'referer', value: refererOf(previous.url) });
  return {
    url: next,
    method: toGet ? 'GET' : previous.method,
    headers,
    body: toGet ? null : previous.body,
  };
}

function refererOf(url: URL): string {
  const copy = new URL(url.href);
  copy.username = '';
  copy.password = '';
  copy.hash = '';
  return copy.href;
}
