// Codex's managed network proxy (`process/start {enforceManagedNetwork, networkProxy}`), differential: the same
// start against Codex's exec-server and ours, without a sandbox and under workspace-write (then in a network
// namespace of its own, the proxy reached through a relay inside, nothing else). The command talks to its proxy with raw requests to a node:http origin
// on 127.0.0.1; what it saw (its proxy variables, each answer's status, headers and body), the
// `network/policyDecision` notifications and what reached the origin must be the same on both
// (findings-network-proxy.md).

import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer, type Server as NetServer } from 'node:net';
import { join } from 'node:path';
import { collectUntilClosed, type RpcMessage, type TestClient } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { proxyConfig } from './proxy-config.ts';
import { sandboxAt, useSandboxScratch, workspaceWrite } from './sandbox-support.ts';
import { KIND_CASES, resumeWhenDetached, useHarness } from './support.ts';

/** Sends each raw request of argv[2] (a JSON list) to $HTTP_PROXY in turn; prints each whole answer. */
const CLIENT = `
const net = require('node:net');
const proxy = new URL(process.env.HTTP_PROXY);
const send = (raw) => new Promise((resolve) => {
  const socket = net.connect(Number(proxy.port), proxy.hostname, () => socket.write(raw));
  let answer = '';
  const tunnel = /^HTTP\\/1\\.1 200 OK\\r\\ndate: [^\\r]*\\r\\n\\r\\n/;
  socket.on('data', (d) => {
    answer += d;
    if (tunnel.test(answer) && !answer.includes('/tunnelled')) {
      if (answer.replace(tunnel, '') === '') return socket.write('GET /tunnelled HTTP/1.1\\r\\nHost: tunnel\\r\\nConnection: close\\r\\n\\r\\n');
    }
    const last = answer.replace(tunnel, '');
    const end = last.indexOf('\\r\\n\\r\\n');
    const length = /content-length: (\\d+)/i.exec(last.slice(0, end));
    if (end >= 0 && length && last.length - end - 4 >= Number(length[1])) socket.end();
  });
  socket.on('close', () => resolve(answer));
  socket.on('error', (e) => resolve('ERROR ' + e.code));
});
(async () => {
  for (const raw of JSON.parse(process.argv[2])) console.log(JSON.stringify(await send(raw)));
})();
`;

const get = (host: string, path: string) =>
  `GET http://${host}${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;
const connect = (authority: string) => `CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`;

/**
 * Tries argv[2] (a port on the host's 127.0.0.1) and argv[3] (a host's unix socket the sandbox can see)
 * directly; prints how each went. Both executors refuse the AF_UNIX socket itself (EPERM).
 */
const DIRECT = `
const net = require('node:net');
const attempt = (label, target) => new Promise((resolve) => {
  const socket = net.connect(target);
  socket.on('connect', () => { console.log(label + ' connected'); socket.destroy(); resolve(); });
  socket.on('error', (e) => { console.log(label + ' ' + e.code); resolve(); });
});
(async () => {
  await attempt('direct tcp', { port: Number(process.argv[2]), host: '127.0.0.1' });
  await attempt('host unix', { path: process.argv[3] });
})();
`;

describe('network proxy: the same proxy on both executors', { timeout: 120_000 }, () => {
  const h = useHarness();
  const scratch = useSandboxScratch();
  let origin: Server;
  const direct = join(h.workDir, 'direct.cjs');
  let port = 0;
  const reached: string[] = [];
  const client = join(h.workDir, 'proxy-client.cjs');
  const outcomes = new Map<string, unknown>();
  // A host's unix socket (a container runtime's, say) in a directory every sandbox here can see.
  let hostSocket: NetServer;
  const hostSocketPath = join(scratch.path, '..', 'host.sock');

  beforeAll(async () => {
    hostSocket = createNetServer((socket) => socket.end('host socket reached\n'));
    await new Promise<void>((resolve) => hostSocket.listen(hostSocketPath, resolve));
    writeFileSync(client, CLIENT);
    writeFileSync(direct, DIRECT);
    origin = createServer((req, res) => {
      reached.push(`${req.method} ${req.url} ${JSON.stringify(req.rawHeaders)}`);
      req.resume();
      req.on('end', () => {
        res.setHeader('x-origin', 'yes');
        res.end('hello from origin\n');
      });
    });
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    port = (origin.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => origin.close(resolve));
    await new Promise((resolve) => hostSocket.close(resolve));
  });

  /**
   * Runs the raw `requests` behind a proxy of `overrides` (or `{shell}`, a command line of its own), under
   * workspace-write with the network on when `sandboxed`, then also trying the origin directly; what the
   * command, the client and the origin saw.
   */
  async function scenario(
    kind: 'codex' | 'tether',
    id: string,
    overrides: Record<string, unknown>,
    requests: string[] | { shell: string },
    sandboxed = false,
    tty = false,
  ) {
    const { client: rpc, initializeResult } = await h.session(kind, 'ws');
    const info = initializeResult.environmentInfo as { capabilities?: Record<string, unknown> } | undefined;
    reached.length = 0;
    const run = Array.isArray(requests) ? `node ${client} '${JSON.stringify(requests)}'` : requests.shell;
    let script = `env | grep -i -e proxy -e CODEX_NETWORK | sort; ${run}`;
    let params = h.startParams(id, ['/bin/bash', '-c', script], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } });
    if (sandboxed) {
      // Last, a write the sandbox refuses: the exit is still classified as the sandbox's doing. First, a
      // function of ~/.bashrc: there only when the shell snapshot was captured (in the same sandbox and relay).
      const { base, root, tmp, outside } = scratch.layout(kind);
      writeFileSync(join(base, '.bashrc'), 'from_profile() { echo "profile captured"; }\n');
      script = `from_profile; ${script}; node ${direct} ${port} ${hostSocketPath}; touch ${outside}/written 2>&1 | sed 's|${outside}|<outside>|'; exit \${PIPESTATUS[0]}`;
      params = {
        ...scratch.startParams(id, ['/bin/bash', '-lc', script], root, sandboxAt(root, workspaceWrite('enabled')), {
          PATH: `${scratch.path}:${process.env.PATH ?? '/usr/bin:/bin'}`,
          TMPDIR: tmp,
          HOME: base,
        }),
        shellSnapshot: { scopeId: `proxy-${kind}`, shell: { name: 'bash', path: '/bin/bash' } },
        tty,
      };
    }
    const started = await rpc.request('process/start', {
      ...params,
      enforceManagedNetwork: true,
      networkProxy: proxyConfig(overrides),
    });
    expect(started.error).toBeUndefined();
    const collected = await collectUntilClosed(rpc, id);
    const proxyPort = /^HTTP_PROXY=http:\/\/127\.0\.0\.1:(\d+)$/m.exec(collected.stdout)?.[1];
    expect(proxyPort).toBeDefined();
    const socksPort = /^ALL_PROXY=socks5h:\/\/127\.0\.0\.1:(\d+)$/m.exec(collected.stdout)?.[1];
    const clean = (text: string) =>
      text
        .replaceAll('\r\n', '\n')
        .replaceAll(`127.0.0.1:${proxyPort}`, '<proxy>')
        .replaceAll(`127.0.0.1:${socksPort ?? proxyPort}`, '<socks>')
        .replaceAll(String(port), '<origin>')
        .replace(/date: [^\\]*\\r\\n/gi, 'date: <date>\\r\\n');
    const decisions = rpc.notifications
      .filter((n) => n.method === 'network/policyDecision')
      .map((n) => {
        const { timestamp, client: from, ...rest } = n.params as Record<string, unknown>;
        expect(Number.isNaN(Date.parse(String(timestamp)))).toBe(false);
        expect(from).toMatch(/^127\.0\.0\.1:\d+$/);
        return { ...rest, port: rest.port === port ? '<origin>' : rest.port };
      });
    const read = (await rpc.call('process/read', { processId: id, afterSeq: 0, maxBytes: 1 })) as {
      sandboxDenied: boolean;
    };
    return {
      networkProxyLaunch: info?.capabilities?.networkProxyLaunch,
      exitCode: collected.exitCode,
      sandboxDenied: read.sandboxDenied,
      seen: clean(collected.stdout).split('\n'),
      decisions,
      reached: reached.map(clean),
    };
  }

  it.each(KIND_CASES)('%s: allow and deny lists, plain and CONNECT', async (_label, kind) => {
    const outcome = await scenario(
      kind,
      'lists',
      { domains: { '127.0.0.1': 'allow', 'denied.test': 'deny', '*.allowed.test': 'allow' } },
      [
        get(`127.0.0.1:${port}`, '/allowed?q=1'),
        `GET /origin-form HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nProxy-Connection: keep-alive\r\nConnection: close\r\n\r\n`,
        get('denied.test', '/x'),
        get('other.test', '/y'),
        get('a.allowed.test', '/unresolvable'),
        connect('denied.test:443'),
        connect('other.test:443'),
        connect(`127.0.0.1:${port}`),
      ],
    );
    expect(outcome.exitCode).toBe(0);
    // Denied requests never reach the origin; allowed ones do, with the client's headers.
    expect(outcome.reached).toHaveLength(3);
    outcomes.set(`lists ${kind}`, outcome);
    if (outcomes.has('lists codex') && outcomes.has('lists tether')) {
      expect(outcomes.get('lists tether')).toEqual(outcomes.get('lists codex'));
    }
  });

  it.each(KIND_CASES)('%s: local addresses and limited mode', async (_label, kind) => {
    const outcome = await scenario(kind, 'limited', { mode: 'limited', domains: { localhost: 'allow' } }, [
      get(`127.0.0.1:${port}`, '/literal-not-named'),
      get(`localhost:${port}`, '/named'),
      `POST http://localhost:${port}/post HTTP/1.1\r\nHost: localhost:${port}\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc`,
      connect(`localhost:${port}`),
    ]);
    expect(outcome.reached).toHaveLength(1);
    outcomes.set(`limited ${kind}`, outcome);
    if (outcomes.has('limited codex') && outcomes.has('limited tether')) {
      expect(outcomes.get('limited tether')).toEqual(outcomes.get('limited codex'));
    }
  });

  it.each(KIND_CASES.flatMap(([label, kind]) => [false, true].map((tty) => [label, tty, kind] as const)))(
    '%s: sandboxed (workspace-write, network on; tty %s): only the proxy is reachable, no host unix socket',
    async (_label, tty, kind) => {
      const outcome = await scenario(
        kind,
        `sandboxed-${tty}`,
        { domains: { '127.0.0.1': 'allow', 'denied.test': 'deny' } },
        [get(`127.0.0.1:${port}`, '/through-the-proxy'), get('denied.test', '/x'), connect(`127.0.0.1:${port}`)],
        true,
        tty,
      );
      // The direct connection fails, so does an AF_UNIX socket to the host's; the refused write is the
      // sandbox's doing; the proxy reached the origin.
      expect(outcome.seen).toContain('direct tcp ECONNREFUSED');
      expect(outcome.seen).toContain('host unix EPERM');
      expect(outcome.seen[0]).toBe('profile captured');
      expect(outcome).toMatchObject({ networkProxyLaunch: true, exitCode: 1, sandboxDenied: true });
      expect(outcome.reached).toHaveLength(2);
      outcomes.set(`sandboxed ${tty} ${kind}`, outcome);
      if (outcomes.has(`sandboxed ${tty} codex`) && outcomes.has(`sandboxed ${tty} tether`)) {
        expect(outcomes.get(`sandboxed ${tty} tether`)).toEqual(outcomes.get(`sandboxed ${tty} codex`));
      }
    },
  );

  it.each(KIND_CASES)(
    '%s: SOCKS5 (enableSocks5): ALL_PROXY names it, CONNECT decided as socks5_tcp, refusals are reply 2',
    async (_label, kind) => {
      const curl = (url: string) => `curl -sS --max-time 20 --socks5-hostname "$ALL_PROXY" ${url} 2>&1; echo "curl=$?"`;
      const outcome = await scenario(
        kind,
        'socks5',
        { enableSocks5: true, domains: { '127.0.0.1': 'allow', 'denied.test': 'deny' } },
        {
          shell: [
            curl(`http://127.0.0.1:${port}/through-socks`),
            curl('http://denied.test/x'),
            curl('http://other.test/y'),
            curl(`http://127.0.0.2:${port}/local`),
            // Allowed, nothing listening there: reply 5.
            curl('http://127.0.0.1:1/refused'),
          ].join('; '),
        },
      );
      expect(outcome.seen).toContain('ALL_PROXY=socks5h://<socks>');
      expect(outcome.seen).toContain('FTP_PROXY=socks5h://<socks>');
      expect(outcome.seen).toContain('hello from origin');
      expect(outcome.seen).toContain("curl: (97) Can't complete SOCKS5 connection to denied.test. (2)");
      expect(outcome.decisions.map((d) => (d as { protocol?: unknown }).protocol)).toEqual(Array(5).fill('socks5_tcp'));
      expect(outcome.reached).toHaveLength(1);
      outcomes.set(`socks5 ${kind}`, outcome);
      if (outcomes.has('socks5 codex') && outcomes.has('socks5 tether')) {
        expect(outcomes.get('socks5 tether')).toEqual(outcomes.get('socks5 codex'));
      }
    },
  );

  it.each(KIND_CASES)('%s: a disabled proxy is refused', async (_label, kind) => {
    const { client: rpc } = await h.session(kind, 'ws');
    const answer = await rpc.request('process/start', {
      ...h.startParams('disabled', ['/bin/true']),
      enforceManagedNetwork: true,
      networkProxy: proxyConfig({ enabled: false }),
    });
    expect(answer.error).toEqual({
      code: -32602,
      message: 'invalid network proxy config: executor-local network proxy launch requires an enabled proxy',
    });
  });
});

describe('network proxy: a client that decides (networkProxyReviewDomains)', { timeout: 120_000 }, () => {
  const h = useHarness();
  const client = join(h.workDir, 'review-client.cjs');
  let origin: Server;
  let port = 0;
  const outcomes = new Map<string, unknown>();

  beforeAll(async () => {
    writeFileSync(client, CLIENT);
    origin = createServer((_req, res) => res.end('hello from origin\n'));
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    port = (origin.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => origin.close(resolve));
  });

  /**
   * Answers each `network/policyRequest` on `rpc` with `answers[host]` (a response's `result` or `error`;
   * absent: no answer; `'close'`: the connection is dropped) until `until` settles; the requests seen.
   */
  function answering(rpc: TestClient, answers: Record<string, unknown>, until: Promise<unknown>) {
    const seen: RpcMessage[] = [];
    const over = until.then(
      () => null,
      () => null,
    );
    const loop = (async () => {
      for (;;) {
        const next = await Promise.race([
          rpc
            .waitForMessage((m) => m.method === 'network/policyRequest' && !seen.includes(m), 110_000)
            .catch(() => null),
          over,
        ]);
        if (next === null) return;
        seen.push(next);
        const answer = answers[(next.params as { request: { host: string } }).request.host];
        if (answer === 'close') rpc.terminate();
        else if (answer !== undefined) rpc.sendRaw(JSON.stringify({ id: next.id, ...(answer as object) }));
      }
    })();
    return { seen, loop };
  }

  /** Runs the raw `requests` behind a proxy of `overrides` and `launch`, answering as `answers` says. */
  async function scenario(
    kind: 'codex' | 'tether',
    id: string,
    overrides: Record<string, unknown>,
    launch: Record<string, unknown>,
    requests: string[],
    answers: Record<string, unknown>,
  ) {
    const { client: rpc, initializeResult } = await h.session(kind, 'ws');
    const info = initializeResult.environmentInfo as { capabilities?: Record<string, unknown> } | undefined;
    const started = await rpc.request('process/start', {
      ...h.startParams(id, ['/bin/bash', '-c', `node ${client} '${JSON.stringify(requests)}'`], {
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      }),
      enforceManagedNetwork: true,
      networkProxy: proxyConfig(overrides, launch),
    });
    expect(started.error).toBeUndefined();
    const collecting = collectUntilClosed(rpc, id, { timeoutMs: 60_000 });
    const { seen, loop } = answering(rpc, answers, collecting);
    const collected = await collecting;
    await loop;
    const clean = (text: string) =>
      text
        .replaceAll('\r\n', '\n')
        .replaceAll(String(port), '<origin>')
        .replace(/date: [^\\]*\\r\\n/gi, 'date: <date>\\r\\n');
    return {
      networkProxyReviewDomains: info?.capabilities?.networkProxyReviewDomains,
      exitCode: collected.exitCode,
      asked: seen.map(({ id: requestId, method, params }) => ({ id: requestId, method, params })),
      decisions: rpc.notifications
        .filter((n) => n.method === 'network/policyDecision')
        .map((n) => {
          const { timestamp: _t, client: _c, ...rest } = n.params as Record<string, unknown>;
          return { ...rest, port: rest.port === port ? '<origin>' : rest.port };
        }),
      seen: clean(collected.stdout).split('\n'),
    };
  }

  /** `outcome` of `kind` kept under `name`; once both executors' are in, they must be the same. */
  function compare(name: string, kind: string, outcome: unknown) {
    outcomes.set(`${name} ${kind}`, outcome);
    if (outcomes.has(`${name} codex`) && outcomes.has(`${name} tether`)) {
      expect(outcomes.get(`${name} tether`)).toEqual(outcomes.get(`${name} codex`));
    }
  }

  const deny = (reason?: string | null) => ({
    result: { decision: reason === undefined ? { type: 'deny' } : { type: 'deny', reason } },
  });

  it.each(KIND_CASES)(
    '%s: each host the policy does not allow, or under review, is put to the client',
    async (_l, kind) => {
      const outcome = await scenario(
        kind,
        'review',
        {
          domains: { 'listed.invalid': 'allow', 'reviewed.invalid': 'allow', 'denied.invalid': 'deny' },
          reviewDomains: ['reviewed.invalid'],
        },
        { policyDecisionTimeoutMs: 60_000 },
        [
          get('asked-deny.invalid', '/a'),
          get('asked-reason.invalid', '/b'),
          get('asked-empty.invalid', '/c'),
          get('asked-denied.invalid', '/d'),
          get('asked-allow.invalid', '/e'),
          connect('asked-allow.invalid:8443'),
          connect('asked-reason.invalid:443'),
          get('asked-error.invalid', '/f'),
          get('asked-garbage.invalid', '/g'),
          get('asked-control.invalid', '/h'),
          get('reviewed.invalid', '/i'),
          get('listed.invalid', '/j'),
          get('denied.invalid', '/k'),
          get(`127.0.0.1:${port}`, '/l'),
        ],
        {
          'asked-deny.invalid': deny(),
          'asked-reason.invalid': deny('not today'),
          'asked-empty.invalid': deny(''),
          'asked-denied.invalid': deny('denied'),
          'asked-allow.invalid': { result: { decision: { type: 'allow' } } },
          'asked-error.invalid': { error: { code: -32000, message: 'no' } },
          'asked-garbage.invalid': { result: { decision: 'allow' } },
          'asked-control.invalid': deny('a\r\nx-injected: y'),
          'reviewed.invalid': deny(null),
        },
      );
      expect(outcome.exitCode).toBe(0);
      // Asked about each of the eleven requests but the allowed, denied and local ones, in order.
      expect(outcome.asked).toHaveLength(11);
      compare('review', kind, outcome);
    },
  );

  it.each(KIND_CASES)('%s: a client that set no timeout is never asked', async (_l, kind) => {
    const outcome = await scenario(
      kind,
      'not-opted-in',
      { reviewDomains: ['asked-deny.invalid'] },
      {},
      [get('asked-deny.invalid', '/a')],
      { 'asked-deny.invalid': { result: { decision: { type: 'allow' } } } },
    );
    expect(outcome.asked).toEqual([]);
    compare('not opted in', kind, outcome);
  });

  it.each(KIND_CASES)('%s: a client that does not answer is denied once the wait is over', async (_l, kind) => {
    const outcome = await scenario(
      kind,
      'unanswered',
      { reviewDomains: [] },
      { policyDecisionTimeoutMs: 1 },
      [get('asked-silent.invalid', '/a')],
      {},
    );
    expect(outcome.asked).toHaveLength(1);
    compare('unanswered', kind, outcome);
  });

  it.each(KIND_CASES)('%s: a dropped connection answers nothing; a resumed one is asked', async (_l, kind) => {
    const { peer, client: rpc, sessionId } = await h.session(kind, 'ws');
    const flag = join(h.workDir, `resumed-${kind}`);
    const script =
      `node ${client} '${JSON.stringify([get('dropped.invalid', '/a')])}'; ` +
      `while [ ! -e ${flag} ]; do sleep 0.05; done; node ${client} '${JSON.stringify([get('after.invalid', '/b')])}'`;
    const started = await rpc.request('process/start', {
      ...h.startParams('dropped', ['/bin/bash', '-c', script], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } }),
      enforceManagedNetwork: true,
      networkProxy: proxyConfig({}, { policyDecisionTimeoutMs: 60_000 }),
    });
    expect(started.error).toBeUndefined();
    await rpc.waitForMessage((m) => m.method === 'network/policyRequest', 30_000);
    rpc.terminate();
    const resumed = await resumeWhenDetached(h, peer, sessionId, 'tether-conformance');
    writeFileSync(flag, '');
    const collecting = collectUntilClosed(resumed, 'dropped', { timeoutMs: 60_000 });
    const { seen, loop } = answering(resumed, { 'after.invalid': deny('after resume') }, collecting);
    const collected = await collecting;
    await loop;
    const outcome = {
      // The first is denied as unanswered once its connection is gone; the second as the resumed client says.
      seen: collected.stdout.split('\n').map((line) => /"reason\\":\\"([^\\]*)/.exec(line)?.[1] ?? line),
      exitCode: collected.exitCode,
      asked: seen.map((m) => (m.params as { request: unknown }).request),
      decided: resumed.notifications
        .filter((n) => n.method === 'network/policyDecision' && (n.params as { host: string }).host === 'after.invalid')
        .map((n) => [(n.params as { source: string }).source, (n.params as { reason: string }).reason]),
    };
    expect(outcome.seen.slice(0, 2)).toEqual(['not_allowed', 'after resume']);
    compare('dropped', kind, outcome);
  });

  it.each(KIND_CASES)('%s: the start is refused as Codex refuses it', async (_l, kind) => {
    const { client: rpc } = await h.session(kind, 'ws');
    const refusals: unknown[] = [];
    for (const [processId, overrides, launch] of [
      ['zero', { reviewDomains: ['a.invalid'] }, { policyDecisionTimeoutMs: 0 }],
      ['', {}, { policyDecisionTimeoutMs: 1000 }],
      ['x'.repeat(257), {}, { policyDecisionTimeoutMs: 1000 }],
      ['é'.repeat(129), {}, { policyDecisionTimeoutMs: 1000 }],
      ['negative', {}, { policyDecisionTimeoutMs: -1 }],
      ['text', {}, { policyDecisionTimeoutMs: 'x' }],
      ['null-review', { reviewDomains: null }, {}],
      ['number-review', { reviewDomains: [5] }, {}],
      ['empty-pattern', { reviewDomains: [''] }, {}],
      ['bad-pattern', { reviewDomains: ['bad pattern!'] }, {}],
      ['transparent', { transparentTcp: true }, {}],
      ['transparent-type', { transparentTcp: 5 }, {}],
      ['transparent-sandboxed', { transparentTcp: true }, { sandboxed: true }],
    ] as const) {
      const { sandboxed, ...rest } = launch as { sandboxed?: boolean };
      const answer = await rpc.request('process/start', {
        ...h.startParams(processId, ['/bin/true']),
        ...(sandboxed ? { sandbox: sandboxAt(h.workDir, workspaceWrite('enabled')) } : {}),
        enforceManagedNetwork: true,
        networkProxy: proxyConfig(overrides, rest),
      });
      refusals.push(answer.error);
    }
    expect(refusals).not.toContain(undefined);
    expect(refusals[0]).toEqual({ code: -32602, message: 'network policy decision callback timeout must be nonzero' });
    expect(refusals[1]).toEqual({
      code: -32602,
      message: 'callback-enabled process ID must be non-empty and at most 256 bytes',
    });
    compare('refused', kind, refusals);
  });
});
