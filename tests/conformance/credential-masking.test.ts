// Credential masking in the managed proxy (`networkProxy.proxy.credentialMasking`, `credentialProviders`;
// FINDINGS-credential-masking.md), differential: the same starts against Codex's exec-server and ours. What the
// command saw in its environment (dummies reduced to their shape), the CA bundle it is pointed at, what reached a
// node:http origin on 127.0.0.1 (never a real value: no destination there is bound), how a bound destination's
// CONNECT is intercepted (the leaf presented, the answers when its origin cannot be reached or another host is
// asked for), the decisions, and the refusals of malformed providers must be the same on both. That a real value is swapped in at
// a bound destination cannot be seen from here on Codex (it binds only public https hosts): credential-masking.test.ts
// in apps/executor tests that part of ours against a local TLS origin.

import { writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { collectUntilClosed } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { proxyConfig } from './proxy-config.ts';
import { KIND_CASES, useHarness } from './support.ts';

const OPENAI = 'sk-proj-ABCdef0123456789ABCdef0123456789ABCdef0123456789xyz';
const GITHUB = 'ghp_0123456789abcdefABCDEF0123456789abcdef';
const CUSTOM = 'tok_abcdefghijklmnop0123';

const CREDENTIALS = {
  OPENAI_API_KEY: OPENAI,
  GITHUB_TOKEN: GITHUB,
  // Another variable holding a masked value gets the same dummy.
  SAME_VALUE: GITHUB,
  GH_TOKEN: 'ghs_x',
  // Not a known credential: as it is.
  ANTHROPIC_API_KEY: 'sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789',
  // Known, but without GH_HOST bound nowhere: as it is.
  GH_ENTERPRISE_TOKEN: 'ghp_ent0123456789abcdef0123456789abcdefABCD',
  MY_TOKEN: CUSTOM,
  LOCAL_TOKEN: 'loc_abcdef',
};

/** The proxy of every start here: api.openai.com allowed, local hosts reached. */
const MASKING = { credentialMasking: true, domains: { 'api.openai.com': 'allow' }, allowLocalBinding: true };

const PROVIDERS = {
  mine: {
    env: ['MY_TOKEN'],
    patterns: ['tok_[a-z0-9]{20}'],
    url_prefixes: ['https://api.example.invalid/v1/'],
    auth: ['bearer'],
  },
  // Bound to a local destination: cannot be protected, left as it is.
  local: { env: ['LOCAL_TOKEN'], patterns: ['loc_[a-z]+'], url_prefixes: ['https://127.0.0.1:1/'] },
  // Plain http: an invalid provider, ignored.
  plain: { env: ['PLAIN_TOKEN'], patterns: ['p_[a-z]+'], url_prefixes: ['http://api.example.invalid/'] },
};

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
  console.log('connect: ' + JSON.stringify(head.replace(/date: [^\\r]*/, 'date: <date>')));
  if (!head.startsWith('HTTP/1.1 200')) return socket.destroy();
  const t = tls.connect({ socket, rejectUnauthorized: false, servername: host }, () => {
    const c = t.getPeerCertificate();
    console.log('certificate: ' + c.subject.CN + ' (' + c.subjectaltname + ') issued by ' + c.issuer.CN + ', ' + c.valid_from + ' to ' + c.valid_to);
    t.write('GET ' + path + ' HTTP/1.1\\r\\nHost: ' + (hostHeader || host) + '\\r\\nAuthorization: Bearer ' + token + '\\r\\nConnection: close\\r\\n\\r\\n');
  });
  let answer = '';
  t.on('data', (c) => (answer += c));
  t.on('end', () => console.log('answer: ' + JSON.stringify(answer.replace(/date: [^\\r]*/, 'date: <date>'))));
  t.on('error', (e) => console.log('tls error ' + e.code));
};
socket.on('data', onData);
socket.on('error', (e) => console.log('error ' + e.code));
`;

/** Dummies reduced to their shape: a built-in's `<prefix>masked<length>`, the custom provider's `<tok dummy>`. */
function shapes(text: string, customDummy: string | undefined): string {
  let out = text.replace(
    /\b(sk-proj-|sk-admin-|sk-svcacct-|sk-|github_pat_|gh[pousr]_)masked([A-Za-z0-9]+)/g,
    (whole, prefix: string) => `${prefix}masked<${whole.length}>`,
  );
  if (customDummy) out = out.replaceAll(customDummy, '<tok dummy>');
  return out;
}

describe('credential masking: the same dummies, bundle and refusals on both executors', { timeout: 120_000 }, () => {
  const h = useHarness();
  let origin: Server;
  let port = 0;
  const reached: string[] = [];
  const tlsClient = join(h.workDir, 'tls-client.cjs');
  const outcomes = new Map<string, unknown>();

  beforeAll(async () => {
    writeFileSync(tlsClient, TLS_CLIENT);
    const record = (scheme: string) => (req: IncomingMessage, res: ServerResponse) => {
      reached.push(`${scheme} ${req.method} ${req.url} authorization=${req.headers.authorization}`);
      req.resume();
      req.on('end', () => res.end('hello from origin\n'));
    };
    origin = createServer(record('http'));
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    port = (origin.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => origin.close(resolve));
  });

  /** Runs `argv` behind a masking proxy with CREDENTIALS in its environment; what it, the origins and the client saw. */
  async function scenario(kind: 'codex' | 'tether', id: string, argv: string[]) {
    const { client: rpc, initializeResult } = await h.session(kind, 'ws');
    const info = initializeResult.environmentInfo as { capabilities?: Record<string, unknown> };
    reached.length = 0;
    const started = await rpc.request(
      'process/start',
      h.startParams(id, argv, {
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...CREDENTIALS },
        enforceManagedNetwork: false,
        networkProxy: proxyConfig({ ...MASKING, credentialProviders: PROVIDERS }),
      }),
    );
    expect(started.error).toBeUndefined();
    const collected = await collectUntilClosed(rpc, id);
    const customDummy = /^MY_TOKEN=(.*)$/m.exec(collected.stdout)?.[1];
    if (customDummy !== CUSTOM) expect(customDummy).toMatch(/^tok_[a-z0-9]{20}$/);
    const bundle = /^SSL_CERT_FILE=(.*)$/m.exec(collected.stdout)?.[1] ?? '';
    const clean = (text: string) =>
      shapes(text, customDummy)
        .replaceAll(bundle, '<bundle>')
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
    '%s: bash -c sees dummies; unbound origins get the dummy; a bound host is intercepted',
    async (_label, kind) => {
      const script = [
        'env | grep -e TOKEN= -e KEY= -e SAME_VALUE= -e CODEX_NETWORK_PROXY_ -e CA -e CERT | grep -v -e _PROXY_ACTIVE | sort',
        // The bundle ends with the proxy's CA.
        'awk \'/BEGIN CERT/{c=""} {c=c $0 "\\n"} END{printf "%s", c}\' "$SSL_CERT_FILE" | openssl x509 -noout -subject -ext basicConstraints',
        `curl -sS http://127.0.0.1:${port}/plain -H "Authorization: Bearer $OPENAI_API_KEY"`,
        `curl -sS http://127.0.0.1:${port}/custom -H "Authorization: Bearer $MY_TOKEN"`,
        // api.openai.com is bound: allowed by name, intercepted with a leaf of the proxy's CA; it does not resolve
        // here, so the intercepted request fails upstream; a request for another host is refused.
        `node ${tlsClient} api.openai.com:443 /v1/models "$OPENAI_API_KEY"`,
        `node ${tlsClient} api.openai.com:443 /v1/models "$OPENAI_API_KEY" other.example`,
        // An unbound name goes on as before: resolved at CONNECT, refused.
        `node ${tlsClient} api.example.invalid:443 / "$MY_TOKEN"`,
      ].join('; ');
      const outcome = await scenario(kind, 'bash', ['/bin/bash', '-c', script]);
      expect(outcome.exitCode).toBe(0);
      expect(outcome.credentialMasking).toEqual([true, true]);
      expect(outcome.seen).toContain('OPENAI_API_KEY=sk-proj-masked<59>');
      expect(outcome.seen).toContain('MY_TOKEN=<tok dummy>');
      expect(outcome.seen).toContain('subject=CN = network_proxy MITM CA');
      expect(outcome.seen).toContain(
        'certificate: rcgen self signed cert (DNS:api.openai.com) issued by network_proxy MITM CA, Jan  1 00:00:00 1975 GMT to Jan  1 00:00:00 4096 GMT',
      );
      expect(outcome.reached).toEqual([
        'http GET /plain authorization=Bearer sk-proj-masked<59>',
        'http GET /custom authorization=Bearer <tok dummy>',
      ]);
      expect(JSON.stringify(outcome)).not.toContain(OPENAI);
      compare('bash', kind, outcome);
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
