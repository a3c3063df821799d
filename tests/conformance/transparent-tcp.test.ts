// Transparent TCP through the managed proxy (`networkProxy.proxy.transparentTcp`, capability
// `networkProxyTransparentTcp`), differential: the same sandboxed start (workspace-write, network on) against
// Codex's exec-server and ours. With it, the command's own TCP to any address but its loopback, proxy variables
// ignored, connects and is decided by the SOCKS5 policy (`socks5_tcp`), a refused one reset; without it the same
// connects are unreachable; the loopback stays the namespace's own either way; the SOCKS5 listener is reachable
// inside through ALL_PROXY; every name resolves to an address standing for it, a connection to which is decided by
// the name; the command cannot undo the routing. Only refusals are observable on both (an allowed
// public address would leave this host): an allowed connection is tested on ours in
// apps/executor/src/network-proxy.test.ts (CODEX-FINDINGS §28, FINDINGS-transparent-tcp.md).

import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { collectUntilClosed } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { policyDecisions, proxyConfig } from './proxy-support.ts';
import { sandboxAt, useSandboxScratch, workspaceWrite } from './sandbox-support.ts';
import { KIND_CASES, useHarness } from './support.ts';

/**
 * Connects to each `host port` of argv[2] (a JSON list) in turn, ignoring the proxy variables, and sends a
 * request once connected; prints how each went: refused or unreachable, reset, or answered. A reset is one
 * whether or not node saw the connection established first: the refusal can beat node's own look at the
 * connect, on both executors.
 */
const CONNECTS = `
const net = require('node:net');
const attempt = ([host, port]) => new Promise((resolve) => {
  const socket = net.connect({ host, port });
  let answer = '';
  socket.on('connect', () => socket.write('GET /transparent HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'));
  socket.on('data', (d) => { answer += d; });
  socket.on('error', (e) => { console.log(host + ' ' + port + ' ' + (e.code === 'ECONNRESET' ? 'reset' : e.code)); resolve(); });
  socket.on('close', (failed) => { if (!failed) console.log(host + ' ' + port + ' answered ' + JSON.stringify(answer.split('\\r\\n')[0])); resolve(); });
});
(async () => { for (const target of JSON.parse(process.argv[2])) await attempt(target); })();
`;

/** The proxy of these starts: SOCKS5 on, one host allowed (the origin's) and one denied. */
const transparentProxy = (overrides: Record<string, unknown>) =>
  proxyConfig({ enableSocks5: true, domains: { '127.0.0.1': 'allow', '192.88.99.9': 'deny' }, ...overrides });

/** Resolves each name of argv (A and AAAA, in turn), then a TTL, an MX and a reverse lookup; prints each answer. */
const RESOLVES = `
const dns = require('node:dns').promises;
const show = async (label, ask) => { try { console.log(label + ' ' + JSON.stringify(await ask())); } catch (e) { console.log(label + ' ' + e.code); } };
(async () => {
  for (const name of process.argv.slice(2)) {
    await show('A ' + name, () => dns.resolve4(name));
    await show('AAAA ' + name, () => dns.resolve6(name));
  }
  const [first] = await dns.resolve4(process.argv[2], { ttl: true });
  console.log('ttl ' + first.ttl);
  await show('MX', () => dns.resolveMx(process.argv[2]));
  try { await dns.reverse('198.18.0.1'); } catch (e) { console.log('PTR ' + e.code); }
})();
`;

describe('network proxy: transparent TCP (networkProxyTransparentTcp)', { timeout: 120_000 }, () => {
  const h = useHarness();
  const scratch = useSandboxScratch();
  const script = join(h.workDir, 'connects.cjs');
  const resolver = join(h.workDir, 'resolves.cjs');
  let origin: Server;
  let port = 0;
  const reached: string[] = [];
  const outcomes = new Map<string, unknown>();

  beforeAll(async () => {
    writeFileSync(script, CONNECTS);
    writeFileSync(resolver, RESOLVES);
    origin = createServer((req, res) => {
      reached.push(`${req.method} ${req.url}`);
      res.end('hello from origin\n');
    });
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    port = (origin.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => origin.close(resolve));
  });

  /**
   * Public addresses no connection is ever made to (refused by the policy: the deprecated 6to4 relay anycast,
   * the IPv6 discard prefix), private and documentation ones (TEST-NET-3, refused as local), the origin on
   * either loopback.
   */
  const targets = () => [
    ['192.88.99.7', 80],
    ['192.88.99.9', 443],
    ['100::7', 80],
    ['203.0.113.7', 80],
    ['10.255.255.7', 80],
    ['fc00::7', 80],
    ['127.0.0.1', port],
    ['::1', port],
  ];

  /** The SOCKS5 listener inside, as ALL_PROXY names it (--noproxy: NO_PROXY is not the point here). */
  const throughSocks = () =>
    `curl -sS --max-time 20 --noproxy '' -x "$ALL_PROXY" http://127.0.0.1:${port}/through-socks 2>&1; echo "curl=$?"`;

  /** Runs `shell` sandboxed behind a proxy of `overrides`: what the command printed, the decisions, the origin's. */
  async function scenario(kind: 'codex' | 'tether', id: string, overrides: Record<string, unknown>, shell: string) {
    const { client: rpc, initializeResult } = await h.session(kind, 'ws');
    const info = initializeResult.environmentInfo as { capabilities?: Record<string, unknown> } | undefined;
    reached.length = 0;
    const { base, root, tmp } = scratch.layout(kind);
    const started = await rpc.request('process/start', {
      ...scratch.startParams(id, ['/bin/bash', '-c', shell], root, sandboxAt(root, workspaceWrite('enabled')), {
        PATH: `${scratch.path}:${process.env.PATH ?? '/usr/bin:/bin'}`,
        TMPDIR: tmp,
        HOME: base,
      }),
      enforceManagedNetwork: true,
      networkProxy: transparentProxy(overrides),
    });
    expect(started.error).toBeUndefined();
    const collected = await collectUntilClosed(rpc, id);
    const decisions = policyDecisions(rpc, port);
    return {
      networkProxyTransparentTcp: info?.capabilities?.networkProxyTransparentTcp,
      exitCode: collected.exitCode,
      seen: collected.stdout.replaceAll(String(port), '<origin>').split('\n'),
      decisions,
      reached: [...reached],
    };
  }

  function compare(name: string, kind: string, outcome: unknown) {
    outcomes.set(`${name} ${kind}`, outcome);
    if (outcomes.has(`${name} codex`) && outcomes.has(`${name} tether`)) {
      expect(outcomes.get(`${name} tether`)).toEqual(outcomes.get(`${name} codex`));
    }
  }

  it.each(KIND_CASES)(
    '%s: with transparentTcp, the command’s own TCP connects and is decided as socks5_tcp, refusals reset; the loopback stays its own',
    async (_label, kind) => {
      const outcome = await scenario(
        kind,
        'transparent',
        { transparentTcp: true },
        [
          `node ${script} '${JSON.stringify(targets())}'`,
          throughSocks(),
          'echo "$ALL_PROXY" | sed -E "s/[0-9]+$/<port>/"',
        ].join('; '),
      );
      expect(outcome.networkProxyTransparentTcp).toBe(true);
      expect(outcome.seen).toEqual([
        '192.88.99.7 80 reset',
        '192.88.99.9 443 reset',
        '100::7 80 reset',
        '203.0.113.7 80 reset',
        '10.255.255.7 80 reset',
        'fc00::7 80 reset',
        '127.0.0.1 <origin> ECONNREFUSED',
        '::1 <origin> ECONNREFUSED',
        'hello from origin',
        'curl=0',
        'socks5h://127.0.0.1:<port>',
        '',
      ]);
      expect(outcome.decisions.map((d) => [d.protocol, d.host, d.port, d.reason])).toEqual([
        ['socks5_tcp', '192.88.99.7', 80, 'not_allowed'],
        ['socks5_tcp', '192.88.99.9', 443, 'denied'],
        ['socks5_tcp', '100::7', 80, 'not_allowed'],
        ['socks5_tcp', '203.0.113.7', 80, 'not_allowed_local'],
        ['socks5_tcp', '10.255.255.7', 80, 'not_allowed_local'],
        ['socks5_tcp', 'fc00::7', 80, 'not_allowed_local'],
        ['socks5_tcp', '127.0.0.1', '<origin>', 'allow'],
      ]);
      expect(outcome.reached).toEqual(['GET /through-socks']);
      compare('transparent', kind, outcome);
    },
  );

  it.each(KIND_CASES)(
    '%s: with transparentTcp, every name resolves to an address of its own, and a connection to it is decided by the name',
    async (_label, kind) => {
      const outcome = await scenario(
        kind,
        'names',
        { transparentTcp: true, domains: { 'denied.invalid': 'deny', 'allowed.invalid': 'allow' } },
        [
          `node ${resolver} denied.invalid Other.Invalid other.invalid allowed.invalid`,
          `node ${script} '${JSON.stringify([
            ['denied.invalid', 443],
            ['other.invalid', 80],
            ['allowed.invalid', 80],
            // In the pool, given out to no name: reset, nothing decided.
            ['198.18.0.200', 80],
          ])}'`,
        ].join('; '),
      );
      expect(outcome.seen).toEqual([
        'A denied.invalid ["198.18.0.1"]',
        'AAAA denied.invalid ["fdc0:de00::1"]',
        'A Other.Invalid ["198.18.0.2"]',
        'AAAA Other.Invalid ["fdc0:de00::2"]',
        'A other.invalid ["198.18.0.2"]',
        'AAAA other.invalid ["fdc0:de00::2"]',
        'A allowed.invalid ["198.18.0.3"]',
        'AAAA allowed.invalid ["fdc0:de00::3"]',
        'ttl 60',
        'MX ENODATA',
        'PTR ENOTFOUND',
        'denied.invalid 443 reset',
        'other.invalid 80 reset',
        'allowed.invalid 80 reset',
        '198.18.0.200 80 reset',
        '',
      ]);
      expect(outcome.decisions.map((d) => [d.protocol, d.host, d.port, d.reason])).toEqual([
        ['socks5_tcp', 'denied.invalid', 443, 'denied'],
        ['socks5_tcp', 'other.invalid', 80, 'not_allowed'],
        // Allowed, then resolved on the host: an unresolvable name is refused as local.
        ['socks5_tcp', 'allowed.invalid', 80, 'not_allowed_local'],
      ]);
      compare('names', kind, outcome);
    },
  );

  it.each(KIND_CASES)(
    '%s: without transparentTcp the same connects are unreachable and undecided; SOCKS5 is still relayed inside',
    async (_label, kind) => {
      const outcome = await scenario(
        kind,
        'direct',
        {},
        `node ${script} '${JSON.stringify(targets())}'; ${throughSocks()}`,
      );
      expect(outcome.seen).toEqual([
        '192.88.99.7 80 ENETUNREACH',
        '192.88.99.9 443 ENETUNREACH',
        '100::7 80 ENETUNREACH',
        '203.0.113.7 80 ENETUNREACH',
        '10.255.255.7 80 ENETUNREACH',
        'fc00::7 80 ENETUNREACH',
        '127.0.0.1 <origin> ECONNREFUSED',
        '::1 <origin> ECONNREFUSED',
        'hello from origin',
        'curl=0',
        '',
      ]);
      expect(outcome.decisions.map((d) => [d.protocol, d.host, d.reason])).toEqual([
        ['socks5_tcp', '127.0.0.1', 'allow'],
      ]);
      compare('direct', kind, outcome);
    },
  );

  it.each(KIND_CASES)(
    '%s: the command cannot undo the routing (no CAP_NET_ADMIN, no netlink): its TCP is still decided',
    async (_label, kind) => {
      const outcome = await scenario(
        kind,
        'undo',
        { transparentTcp: true },
        [
          // Both fail (their exit codes differ: Codex's namespace has no such ruleset or route to remove).
          'nft flush ruleset 2>/dev/null && echo "nft flushed" || echo "nft failed"',
          'ip route flush table local 2>/dev/null && echo "routes flushed" || echo "ip failed"',
          `node ${script} '${JSON.stringify([['192.88.99.7', 80]])}'`,
        ].join('; '),
      );
      expect(outcome.seen).toEqual(['nft failed', 'ip failed', '192.88.99.7 80 reset', '']);
      expect(outcome.decisions.map((d) => [d.protocol, d.host, d.reason])).toEqual([
        ['socks5_tcp', '192.88.99.7', 'not_allowed'],
      ]);
      compare('undo', kind, outcome);
    },
  );

  it.each(KIND_CASES)('%s: refused without a sandbox, and without the SOCKS5 listener', async (_label, kind) => {
    const { client: rpc } = await h.session(kind, 'ws');
    const { root } = scratch.layout(kind);
    const start = (id: string, sandboxed: boolean, overrides: Record<string, unknown>) =>
      rpc.request('process/start', {
        ...scratch.startParams(id, ['/bin/true'], root, sandboxed ? sandboxAt(root, workspaceWrite('enabled')) : null),
        enforceManagedNetwork: true,
        networkProxy: transparentProxy({ transparentTcp: true, ...overrides }),
      });
    expect((await start('unsandboxed', false, {})).error).toEqual({
      code: -32602,
      message: 'transparent TCP requires a managed Linux sandbox',
    });
    expect((await start('no-socks', true, { enableSocks5: false })).error).toEqual({
      code: -32602,
      message: 'invalid network proxy config: transparent_tcp requires an enabled managed SOCKS5 proxy',
    });
  });
});
