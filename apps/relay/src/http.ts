import type { KeyObject } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { REVOCATIONS_SIGNATURE_HEADER, verifyRevocations } from '@tether/relay-auth';
import { PROMETHEUS_CONTENT_TYPE } from '@tether/telemetry';
import type { Logger } from 'pino';
import type { TrustedProxies } from './client-address.js';
import { Counts } from './memory.js';
import type { PushResult, RelayMetrics, RevocationSource } from './metrics.js';
import type { PushSources } from './push-sources.js';
import {
  isRevocationsPath,
  MAX_CONCURRENT_PUSHES,
  MAX_PUSHES_PER_SOURCE,
  MAX_REVOCATION_BODY_BYTES,
  PUSH_BODY_TIMEOUT_MS,
  parseRevocationPush,
  type Revocation,
  readRequestLimited,
  wellFormedSignature,
} from './revocations.js';

/** Deadlines for a plain HTTP request's headers and for all of it (a revocation push's body included). */
export const HEADERS_TIMEOUT_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 30_000;

export interface HttpOptions {
  /** The registry's key: revocation pushes are signed with it. */
  publicKey: KeyObject;
  log: Logger;
  metrics: RelayMetrics;
  trustProxy: TrustedProxies;
  pushSources: PushSources;
  /** Listening and not closing (`/readyz`). */
  ready(): boolean;
  metricsText(): Promise<string>;
  revoke(revocations: Revocation[], source: RevocationSource): void;
}

/**
 * The relay's plain HTTP: `/livez`, `/readyz`, `/metrics` and the registry's revocation push, on a server with short
 * deadlines. Node's defaults let a client take 60 s to send its headers and 5 min for a whole request (and check
 * only every 30 s): nothing here but a revocation push has a body. The deadlines end at the upgrade (Node stops
 * tracking an upgraded socket), so WebSockets are not affected.
 */
export function createHttpServer(options: HttpOptions): Server {
  const { log } = options;
  const pushes = (result: PushResult) => options.metrics.counter('relay_revocation_pushes_total', { result }).inc();
  /** Revocation pushes whose body is being read now, by source address (at most MAX_CONCURRENT_PUSHES in all). */
  const pushesReading = new Counts();
  let pushesReadingTotal = 0;

  function serve(req: IncomingMessage, res: ServerResponse) {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && path === '/livez') return json(res, 200, { status: 'ok' });
    if (req.method === 'GET' && path === '/readyz') {
      const ready = options.ready();
      return json(res, ready ? 200 : 503, { status: ready ? 'ready' : 'not_ready' });
    }
    if (req.method === 'GET' && path === '/metrics') {
      options.metricsText().then(
        (text) => res.writeHead(200, { 'content-type': PROMETHEUS_CONTENT_TYPE }).end(text),
        (err: Error) => {
          log.warn({ err: err.message }, 'metrics collection failed');
          fail(res, 500, 'internal', 'the metrics could not be collected');
        },
      );
      return;
    }
    if (req.method === 'POST' && isRevocationsPath(path ?? '')) {
      onRevocationPush(req, res).catch((err: Error) => {
        log.warn({ err: err.message }, 'revocation push failed');
        if (!res.headersSent) fail(res, 500, 'internal', 'the revocation push could not be handled');
      });
      return;
    }
    return json(res, 404, { error: { code: 'not_found', message: 'no such route (WebSocket upgrades only)' } });
  }

  /**
   * The registry's push: a signed list of revoked registrations. The signature (by the key the relay verifies URLs
   * with) is checked over the exact body bytes before anything in it is parsed. Before a byte of the body is read:
   * the source must be one of the registry's addresses (when known), the signature header must be shaped like one,
   * and the source must not have a push being read already, nor may MAX_CONCURRENT_PUSHES be; the body must then
   * arrive within PUSH_BODY_TIMEOUT_MS.
   */
  async function onRevocationPush(req: IncomingMessage, res: ServerResponse) {
    // A refusal that ends the socket with the answer: the body is not wanted (or did not come whole).
    const refuseUnread = (result: PushResult, status: number, message: string) => {
      pushes(result);
      res.once('finish', () => req.destroy());
      if (status === 503) res.setHeader('retry-after', '1');
      fail(res, status, result, message);
    };
    const source = options.trustProxy.clientAddress(req.socket.remoteAddress, req.headers['x-forwarded-for']);
    if (!options.pushSources.allows(source)) {
      return refuseUnread('forbidden_source', 403, 'revocations are taken from the registry’s addresses only');
    }
    const signature = req.headers[REVOCATIONS_SIGNATURE_HEADER];
    if (!wellFormedSignature(signature)) {
      return refuseUnread(
        'bad_signature',
        401,
        `${REVOCATIONS_SIGNATURE_HEADER} header required: a base64url Ed25519 signature (86 characters)`,
      );
    }
    if (pushesReading.get(source) >= MAX_PUSHES_PER_SOURCE) {
      return refuseUnread('source_busy', 503, `at most ${MAX_PUSHES_PER_SOURCE} revocation push per address at once`);
    }
    if (pushesReadingTotal >= MAX_CONCURRENT_PUSHES) {
      return refuseUnread('busy', 503, `at most ${MAX_CONCURRENT_PUSHES} revocation pushes are read at once`);
    }
    pushesReading.add(source);
    pushesReadingTotal += 1;
    let body: Buffer | null | 'timeout';
    try {
      body = await readRequestLimited(req, MAX_REVOCATION_BODY_BYTES, PUSH_BODY_TIMEOUT_MS);
    } finally {
      pushesReadingTotal -= 1;
      pushesReading.remove(source);
    }
    if (body === 'timeout') {
      return refuseUnread('timeout', 408, `a revocation body must arrive within ${PUSH_BODY_TIMEOUT_MS} ms`);
    }
    if (body === null) {
      return refuseUnread('too_large', 413, `a revocation body is at most ${MAX_REVOCATION_BODY_BYTES} bytes`);
    }
    const text = body.toString('utf8');
    if (!verifyRevocations(text, signature, options.publicKey)) {
      pushes('bad_signature');
      return fail(res, 401, 'bad_signature', `${REVOCATIONS_SIGNATURE_HEADER} does not verify under the registry key`);
    }
    const push = parseRevocationPush(text);
    if (!push) {
      pushes('malformed');
      return fail(
        res,
        400,
        'malformed',
        'expected {"revoked_registrations":[{"environment_id","registration_id"}…],"issued_at":<epoch seconds>}',
      );
    }
    options.revoke(push.revocations, 'push');
    pushes('ok');
    json(res, 200, { status: 'ok' });
  }

  return createServer(
    { headersTimeout: HEADERS_TIMEOUT_MS, requestTimeout: REQUEST_TIMEOUT_MS, connectionsCheckingInterval: 1_000 },
    serve,
  );
}

function json(res: ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

function fail(res: ServerResponse, status: number, code: string, message: string) {
  json(res, status, { error: { code, message } });
}
