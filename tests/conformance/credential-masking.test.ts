// Credential masking in the managed proxy (`networkProxy.proxy.credentialMasking`, `credentialProviders`;
// FINDINGS-credential-masking.md), differential: the same starts against Codex's exec-server and ours. What the
// command saw in its environment (dummies reduced to their shape), the CA bundle it is pointed at, what reached a
// node:http origin on 127.0.0.1 (never a real value: no destination there is bound), how a bound destination's
// CONNECT is intercepted (the leaf presented, the answers when its origin cannot be reached or another host is
// asked for), the decisions, and the refusals of malformed providers must be the same on both. That a real value is swapped in at
// a bound destination cannot be seen from here on Codex (it binds only public https hosts): credential-masking.test.ts
// in apps/executor tests that part of ours against a local TLS origin.

import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { join } from 'node:path';
import { collectUntilClosed, writeOriginCertificates } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { proxyConfig } from './proxy-support.ts';
import { sandboxAt, useSandboxScratch, workspaceWrite } from './sandbox-support.ts';
import { KIND_CASES, useHarness } from './support.ts';

// Test values shaped as real keys, assembled so that the repository's secrets check does not take them for leaks.
const OPENAI = ['sk', 'proj', 'ABCdef0123456789ABCdef0123456789ABCdef0123456789xyz'].join('-');
const GITHUB = 'ghp_0123456789abcdefABCDEF0123456789abcdef';
const CUSTOM = 'tok_abcdefghijklmnop0123';
const SWAP = 'swp_0123456789abcdef';

const CREDENTIALS = {
  OPENAI_API_KEY: OPENAI,
  GITHUB_TOKEN: GITHUB,
  // Another variable holding a masked value gets the same dummy.
  SAME_VALUE: GITHUB,
  GH_TOKEN: 'ghs_x',
  // Not a known credential: as it is.
  ANTHROPIC_API_KEY: ['sk', 'ant', 'api03', 'abcdefghijklmnopqrstuvwxyz0123456789'].join('-'),
  // Known, but without GH_HOST bound nowhere: as it is.
  GH_ENTERPRISE_TOKEN: 'ghp_ent0123456789abcdef0123456789abcdefABCD',
  MY_TOKEN: CUSTOM,
  SWAP_TOKEN: SWAP,
};

/**
 * The proxy of every start here: api.openai.com and the origin's 127.0.0.1 allowed. (Not `allowLocalBinding`: with it
 * Codex names local hosts in NO_PROXY, so a client goes around the proxy, and still refuses them through it.)
 */
const MASKING = { credentialMasking: true, domains: { 'api.openai.com': 'allow', '127.0.0.1': 'allow' } };

/** The custom providers; `swap` is bound to `/api/` of the HTTPS origin on 127.0.0.1 at `tlsPort`. */
const providers = (tlsPort: number) => ({
  mine: {
    env: ['MY_TOKEN'],
    patterns: ['tok_[a-z0-9]{20}'],
    url_prefixes: ['https://api.example.invalid/v1/'],
    auth: ['bearer'],
  },
  swap: { env: ['SWAP_TOKEN'], patterns: ['swp_[a-f0-9]{16}'], url_prefixes: [`https://127.0.0.1:${tlsPort}/api/`] },
  // Plain http: an invalid provider, ignored.
  plain: { env: ['PLAIN_TOKEN'], patterns: ['p_[a-z]+'], url_prefixes: ['http://api.example.invalid/'] },
});

/**
 * Through $HTTPS_PROXY: CONNECT to argv[2] (host:port), TLS for that name without verification; prints the
 * proxy's answer, the certificate presented (subject, names, issuer, validity), then the answer to a GET of argv[3]
 * with `Host: argv[5]` (default: the CONNECT's host) and `Authorization: Bearer argv[4]`.
 */
const TLS_CLIENT = `
const net = require('node:net'); const tls = require('node:tls');
const proxy = new URL(process.env.HTTPS_PROXY);
const [target, path, token, hostHeader] = process.argv.slice(2);
const host = target.replace(/:\\d+$/, '');
const socket = net.connect(Number(proxy.port), proxy.hostname, () => socket.write('CONNECT ' + target + ' HTTP/1.1\\r\\nHost: ' + target + '\\r\\n\\r\\n'));
let head = '';
const onData = (d) => {
  head += d;
  if (!head.includes('\\r\\n\\r\\n')) return;
  socket.off('data', onData);
  console.log('connect: ' + JSON.stringify(head.replace(/date: [^\\r]*/gi, 'date: <date>')));
  if (!head.startsWith('HTTP/1.1 200')) return socket.destroy();
  const t = tls.connect({ socket, rejectUnauthorized: false, servername: /^[0-9.]+$/.test(host) ? undefined : host }, () => {
    const c = t.getPeerCertificate();
    console.log('certificate: ' + c.subject.CN + ' (' + c.subjectaltname + ') issued by ' + c.issuer.CN + ', ' + c.valid_from + ' to ' + c.valid_to);
    t.write('GET ' + path + ' HTTP/1.1\\r\\nHost: ' + (hostHeader || host) + '\\r\\nAuthorization: Bearer ' + token + '\\r\\nConnection: close\\r\\n\\r\\n');
  });
  let answer = '';
  t.on('data', (c) => (answer += c));
  t.on('end', () => console.log('answer: ' + JSON.stringify(answer.replace(/date: [^\\r]*/gi, 'date: <date>'))));
  t.on('error', (e) => console.log('tls error ' + e.code));
};
socket.on('data', onData);
socket.on('error', (e) => console.log('error ' + e.code));
`;

/** Dummies reduced to their shape: a built-in's `<prefix>masked<length>`, the custom provider's `<tok dummy>`. */
function shapes(text: string, customDummies: Record<string, string>): string {
  let out = text.replace(
    /\b(sk-proj-|sk-admin-|sk-svcacct-|sk-|github_pat_|gh[pousr]_)masked([A-Za-z0-9]+)/g,
    (whole, prefix: string) => `${prefix}masked<${whole.length}>`,
  );
  for (const [name, dummy] of Object.entries(customDummies)) out = out.replaceAll(dummy, `<${name} dummy>`);
  return out;
}

describe('credential masking: the same dummies, bundle and refusals on both executors', { timeout: 120_000 }, () => {
  const h = useHarness();
  const scratch = useSandboxScratch();
  let origin: Server;
  let tlsOrigin: HttpsServer;
  let port = 0;
  let tlsPort = 0;
  const originCa = join(h.workDir, 'origin-ca.crt');
  const reached: string[] = [];
  const tlsClient = join(h.workDir, 'tls-client.cjs');
  const outcomes = new Map<string, unknown>();

  beforeAll(async () => {
    writeFileSync(tlsClient, TLS_CLIENT);
    const record = (scheme: string) => (req: IncomingMessage, res: ServerResponse) => {
      const host = scheme === 'https' ? ` host=${req.headers.host?.replace(String(tlsPort), '<tls port>')}` : '';
      reached.push(`${scheme} ${req.method} ${req.url}${host} authorization=${req.headers.authorization}`);
      req.resume();
      req.on('end', () => res.end('hello from origin\n'));
    };
    origin = createServer(record('http'));
    // The HTTPS origin's certificate (for 127.0.0.1) comes from a CA of the test's own, which both executors are
    // told to trust for intercepted connections (SSL_CERT_FILE in their environment, as Codex reads it).
    const certs = writeOriginCertificates(h.workDir);
    tlsOrigin = createHttpsServer({ key: readFileSync(certs.key), cert: readFileSync(certs.cert) }, record('https'));
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    await new Promise<void>((resolve) => tlsOrigin.listen(0, '127.0.0.1', resolve));
    port = (origin.address() as { port: number }).port;
    tlsPort = (tlsOrigin.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => origin.close(resolve));
    await new Promise((resolve) => tlsOrigin.close(resolve));
  });

  /**
   * Runs `argv` behind a masking proxy (`overrides` on MASKING) with CREDENTIALS in its environment (`sandboxed`:
   * under workspace-write with the network on and the proxy enforced); what it, the origin and the client saw.
   */
  async function scenario(
    kind: 'codex' | 'tether',
    id: string,
    argv: string[],
    sandboxed = false,
    overrides: Record<string, unknown> = {},
  ) {
    const { client: rpc, initializeResult } = await h.session(kind, 'ws', { env: { SSL_CERT_FILE: originCa } });
    const info = initializeResult.environmentInfo as { capabilities?: Record<string, unknown> };
    reached.length = 0;
    const networkProxy = proxyConfig({ ...MASKING, credentialProviders: providers(tlsPort), ...overrides });
    let params = h.startParams(id, argv, {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...CREDENTIALS },
      enforceManagedNetwork: false,
      networkProxy,
    });
    if (sandboxed) {
      const { base, root, tmp } = scratch.layout(kind);
      const sandbox = sandboxAt(root, workspaceWrite('enabled'));
      const env = { TMPDIR: tmp, HOME: base, ...CREDENTIALS };
      params = { ...scratch.startParams(id, argv, root, sandbox, env), enforceManagedNetwork: true, networkProxy };
    }
    const started = await rpc.request('process/start', params);
    expect(started.error).toBeUndefined();
    const collected = await collectUntilClosed(rpc, id);
    const customDummies: Record<string, string> = {};
    for (const [name, real, shape] of [
      ['MY_TOKEN', CUSTOM, /^tok_[a-z0-9]{20}$/],
      ['SWAP_TOKEN', SWAP, /^swp_[a-f0-9]{16}$/],
    ] as const) {
      const seen = new RegExp(`^${name}=(.*)$`, 'm').exec(collected.stdout)?.[1];
      if (seen === undefined || seen === real) continue;
      expect(seen).toMatch(shape);
      customDummies[name] = seen;
    }
    const bundle = /^SSL_CERT_FILE=(.*)$/m.exec(collected.stdout)?.[1] ?? '';
    const clean = (text: string) =>
      shapes(text, customDummies)
        .replaceAll(bundle || '<no bundle>', '<bundle>')
        .replace(/127\.0\.0\.1:\d+/g, '127.0.0.1:<port>')
        .replace(/(HTTPS?_PROXY|_proxy|_PROXY)=http:\/\/127\.0\.0\.1:<port>/g, '$1=<proxy>');
    const decisions = rpc.notifications
      .filter((n) => n.method === 'network/policyDecision')
      .map((n) => {
        const { timestamp: _t, client: _c, ...rest } = n.params as Record<string, unknown>;
        return rest;
      });
    return {
      credentialMasking: [info.capabilities?.credentialMasking, info.capabilities?.credentialMaskingCustomProviders],
      exitCode: collected.exitCode,
      seen: clean(collected.stdout).split('\n'),
      reached: reached.map(clean),
      decisions,
    };
  }

  const compare = (name: string, kind: string, outcome: unknown) => {
    outcomes.set(`${name} ${kind}`, outcome);
    if (outcomes.has(`${name} codex`) && outcomes.has(`${name} tether`)) {
      expect(outcomes.get(`${name} tether`)).toEqual(outcomes.get(`${name} codex`));
    }
  };

  it.each(KIND_CASES)(
    '%s: bash -c sees dummies; the origin gets the dummy; a bound host that does not resolve is refused',
    async (_label, kind) => {
      const script = [
        'env | grep -e TOKEN= -e KEY= -e SAME_VALUE= -e CODEX_NETWORK_PROXY_ -e CA -e CERT | grep -v -e _PROXY_ACTIVE | sort',
        // The bundle ends with the proxy's CA.
        'awk \'/BEGIN CERT/{c=""} {c=c $0 "\\n"} END{printf "%s", c}\' "$SSL_CERT_FILE" | openssl x509 -noout -subject -ext basicConstraints',
        `curl -sS http://127.0.0.1:${port}/plain -H "Authorization: Bearer $OPENAI_API_KEY"`,
        `curl -sS http://127.0.0.1:${port}/custom -H "Authorization: Bearer $MY_TOKEN"`,
        // api.openai.com is bound and allowed, but resolves nowhere here: refused at CONNECT as before.
        `node ${tlsClient} api.openai.com:443 /v1/models "$OPENAI_API_KEY"`,
        `node ${tlsClient} api.example.invalid:443 / "$MY_TOKEN"`,
      ].join('; ');
      const outcome = await scenario(kind, 'bash', ['/bin/bash', '-c', script]);
      expect(outcome.exitCode).toBe(0);
      expect(outcome.credentialMasking).toEqual([true, true]);
      expect(outcome.seen).toContain('OPENAI_API_KEY=sk-proj-masked<59>');
      expect(outcome.seen).toContain('MY_TOKEN=<MY_TOKEN dummy>');
      expect(outcome.seen).toContain('subject=CN = network_proxy MITM CA');
      expect(outcome.reached).toEqual([
        'http GET /plain authorization=Bearer sk-proj-masked<59>',
        'http GET /custom authorization=Bearer <MY_TOKEN dummy>',
      ]);
      expect(JSON.stringify(outcome)).not.toContain(OPENAI);
      compare('bash', kind, outcome);
    },
  );

  it.each(KIND_CASES)(
    '%s: sandboxed with enforcement: the same dummies and bundle, the dummy through the relay',
    async (_label, kind) => {
      const script = [
        'env | grep -e OPENAI_API_KEY= -e GITHUB_TOKEN= -e MY_TOKEN= -e BROKER_ACTIVE -e SSL_CERT_FILE= | sort',
        'awk \'/BEGIN CERT/{c=""} {c=c $0 "\\n"} END{printf "%s", c}\' "$SSL_CERT_FILE" | openssl x509 -noout -subject',
        `curl -sS http://127.0.0.1:${port}/sandboxed -H "Authorization: Bearer $OPENAI_API_KEY"`,
        `node ${tlsClient} api.openai.com:443 /v1/models "$OPENAI_API_KEY"`,
      ].join('; ');
      const outcome = await scenario(kind, 'sandboxed', ['/bin/bash', '-c', script], true);
      expect(outcome.exitCode).toBe(0);
      expect(outcome.seen).toContain('subject=CN = network_proxy MITM CA');
      expect(outcome.reached).toEqual(['http GET /sandboxed authorization=Bearer sk-proj-masked<59>']);
      compare('sandboxed', kind, outcome);
    },
  );

  it.each(KIND_CASES)(
    '%s: with allowLocalBinding a bound host is allowed by name and intercepted with a leaf of the proxy CA',
    async (_label, kind) => {
      const script = [
        // It does not resolve here, so the intercepted request fails upstream; a request for another host is refused.
        `node ${tlsClient} api.openai.com:443 /v1/models "$OPENAI_API_KEY"`,
        `node ${tlsClient} api.openai.com:443 /v1/models "$OPENAI_API_KEY" other.example`,
      ].join('; ');
      const outcome = await scenario(kind, 'intercepted', ['/bin/bash', '-c', script], false, {
        allowLocalBinding: true,
        domains: { 'api.openai.com': 'allow' },
      });
      expect(outcome.seen).toContain(
        'certificate: rcgen self signed cert (DNS:api.openai.com) issued by network_proxy MITM CA, Jan  1 00:00:00 1975 GMT to Jan  1 00:00:00 4096 GMT',
      );
      expect(outcome.seen.filter((line) => line.startsWith('answer: '))).toEqual([
        'answer: "HTTP/1.1 502 Bad Gateway\\r\\ncontent-type: text/plain\\r\\nconnection: close\\r\\ncontent-length: 19\\r\\ndate: <date>\\r\\n\\r\\nmitm upstream error"',
        'answer: "HTTP/1.1 400 Bad Request\\r\\ncontent-type: text/plain\\r\\nconnection: close\\r\\ncontent-length: 13\\r\\ndate: <date>\\r\\n\\r\\nhost mismatch"',
      ]);
      compare('intercepted', kind, outcome);
    },
  );

  it.each(KIND_CASES)(
    '%s: the real value reaches a bound destination only (host, port, path prefix), over intercepted TLS',
    async (_label, kind) => {
      const to = (path: string, host = `127.0.0.1:${tlsPort}`) =>
        `node ${tlsClient} 127.0.0.1:${tlsPort} ${path} "$SWAP_TOKEN" ${host}`;
      const script = ['env | grep -e SWAP_TOKEN=', to('/api/x'), to('/other'), to('/apix'), to('/api/y', '127.0.0.1')];
      const outcome = await scenario(kind, 'swap', ['/bin/bash', '-c', script.join('; ')]);
      expect(outcome.seen).toContain('SWAP_TOKEN=<SWAP_TOKEN dummy>');
      expect(outcome.reached).toEqual([
        `https GET /api/x host=127.0.0.1:<tls port> authorization=Bearer ${SWAP}`,
        'https GET /other host=127.0.0.1:<tls port> authorization=Bearer <SWAP_TOKEN dummy>',
        'https GET /apix host=127.0.0.1:<tls port> authorization=Bearer <SWAP_TOKEN dummy>',
        // A Host without the port is the CONNECT's host too; the origin gets the CONNECT's authority.
        `https GET /api/y host=127.0.0.1:<tls port> authorization=Bearer ${SWAP}`,
      ]);
      compare('swap', kind, outcome);
    },
  );

  it.each(KIND_CASES)('%s: sh -c is not masked, but is pointed at the bundle', async (_label, kind) => {
    const outcome = await scenario(kind, 'sh', [
      '/bin/sh',
      '-c',
      `env | grep -e OPENAI_API_KEY= -e MY_TOKEN= -e BROKER -e SSL_CERT_FILE= | sort; curl -sS http://127.0.0.1:${port}/sh -H "Authorization: Bearer $OPENAI_API_KEY"`,
    ]);
    expect(outcome.seen).toContain(`OPENAI_API_KEY=${OPENAI}`);
    expect(outcome.reached).toEqual([`http GET /sh authorization=Bearer ${OPENAI}`]);
    compare('sh', kind, outcome);
  });

  it.each(KIND_CASES)('%s: malformed credentialMasking and credentialProviders are refused', async (_label, kind) => {
    const { client: rpc } = await h.session(kind, 'ws');
    const answers: unknown[] = [];
    const cases: Record<string, unknown>[] = [
      { credentialMasking: 'x' },
      { credentialMasking: null },
      { credentialMasking: true, credentialProviders: [] },
      { credentialMasking: true, credentialProviders: null },
      { credentialMasking: true, credentialProviders: { x: 5 } },
      { credentialMasking: true, credentialProviders: { x: { env: 'FOO' } } },
      { credentialMasking: true, credentialProviders: { x: { env: ['FOO'], bogus: 1 } } },
      { credentialMasking: true, credentialProviders: { x: { auth: ['bogus'] } } },
      { credentialMasking: true, credentialProviders: { x: { auth: [5] } } },
      { credentialMasking: true, credentialProviders: { x: { auth: [{}] } } },
      { credentialMasking: true, credentialProviders: { x: { prefix: 5 } } },
      // Accepted: providers that are only ignored when used.
      { credentialMasking: true, credentialProviders: { '': {}, x: { header: null, auth: ['basic'] } } },
    ];
    for (const [i, overrides] of cases.entries()) {
      const answer = await rpc.request(
        'process/start',
        h.startParams(`refused-${i}`, ['/bin/true'], { networkProxy: proxyConfig({ ...MASKING, ...overrides }) }),
      );
      answers.push(answer.error ?? 'started');
    }
    expect(answers.at(-1)).toBe('started');
    await collectUntilClosed(rpc, `refused-${cases.length - 1}`);
    compare('refusals', kind, answers);
  });
});
