import { once } from 'node:events';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';

/** Every proxy variable blanked: merged into a child's environment so a developer's own proxy settings stay out. */
export const NO_AMBIENT_PROXY: Readonly<Record<string, string>> = Object.freeze({
  HTTP_PROXY: '',
  http_proxy: '',
  HTTPS_PROXY: '',
  https_proxy: '',
  ALL_PROXY: '',
  all_proxy: '',
  NO_PROXY: '',
  no_proxy: '',
});

/** One request a proxy saw: a CONNECT tunnel (`target` is host:port) or a forwarded absolute-form request. */
export interface ProxiedRequest {
  readonly kind: 'connect' | 'forward';
  readonly target: string;
  readonly method: string;
  /** The Proxy-Authorization header, if any. */
  readonly authorization: string | undefined;
}

export interface HttpProxy {
  /** http://127.0.0.1:PORT */
  readonly url: string;
  /** Everything the proxy handled, in order. */
  readonly seen: ProxiedRequest[];
  close(): Promise<void>;
}

/**
 * A forwarding HTTP proxy on 127.0.0.1:0 for tests of the outbound proxy support: CONNECT tunnels and
 * absolute-form requests, both recorded. With `credentials` ("user:password"), anything without the matching
 * Basic Proxy-Authorization is answered 407.
 */
export async function startHttpProxy(options: { credentials?: string } = {}): Promise<HttpProxy> {
  const seen: ProxiedRequest[] = [];
  const sockets = new Set<Socket>();
  const expected = options.credentials ? `Basic ${Buffer.from(options.credentials).toString('base64')}` : undefined;
  const allowed = (req: IncomingMessage) => expected === undefined || req.headers['proxy-authorization'] === expected;

  const server: Server = createServer((req, res) => {
    const authorization = req.headers['proxy-authorization'];
    seen.push({ kind: 'forward', target: req.url ?? '', method: req.method ?? '', authorization });
    if (!allowed(req)) {
      res.writeHead(407, { 'proxy-authenticate': 'Basic realm="test"' }).end();
      return;
    }
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end('absolute-form request expected');
      return;
    }
    const headers = { ...req.headers };
    delete headers['proxy-authorization'];
    delete headers['proxy-connection'];
    const upstream = httpRequest(target, { method: req.method, headers, agent: false }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.once('error', () => res.writeHead(502).end());
    req.pipe(upstream);
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('connect', (req: IncomingMessage, client: Socket, head: Buffer) => {
    const authorization = req.headers['proxy-authorization'];
    seen.push({ kind: 'connect', target: req.url ?? '', method: 'CONNECT', authorization });
    if (!allowed(req)) {
      client.end('HTTP/1.1 407 Proxy Authentication Required\r\nproxy-authenticate: Basic realm="test"\r\n\r\n');
      return;
    }
    const match = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(req.url ?? '');
    if (!match) {
      client.end('HTTP/1.1 400 Bad Request\r\n\r\n');
      return;
    }
    const upstream = connect(Number(match[2]), match[1]!.replace(/^\[(.*)\]$/, '$1'));
    sockets.add(upstream);
    upstream.once('close', () => sockets.delete(upstream));
    upstream.once('connect', () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.once('error', () => client.destroy());
    client.once('error', () => upstream.destroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
