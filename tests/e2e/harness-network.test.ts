/**
 * `harness exec --network-allow HOST` through the whole product path (the harness bin → registry → relay → our
 * executor in remote mode): the command reaches the hosts named, through the managed proxy the executor runs
 * for it (capability `networkProxyLaunch`), and nothing else; what the proxy refused is said on stderr.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { harnessScript, useWork } from './stack-suite.ts';

const ENVIRONMENT = 'network-e2e';
let stack: Stack;
let origin: Server;
let originPort: number;
/** The paths the origin was asked for, in order. */
const reached: string[] = [];
/** The origin's URL, written into the remote command (its environment is the executor's, not ours). */
const originUrl = () => `http://127.0.0.1:${originPort}`;
const work = useWork('tether-harness-network-', () => stack);

/** Runs `script` in bash with `h` as the harness bin (harnessScript, on this file's environment). */
const sh = (script: string) => harnessScript(stack, ENVIRONMENT, work, script);

beforeAll(async () => {
  origin = createServer((req, res) => {
    reached.push(req.url ?? '');
    res.end('origin says hi\n');
  });
  origin.listen(0, '127.0.0.1');
  await once(origin, 'listening');
  originPort = (origin.address() as AddressInfo).port;
  stack = await startStack();
  await stack.startExecutor('tether', ENVIRONMENT);
}, 120_000);

afterAll(async () => {
  origin?.closeAllConnections();
  origin?.close();
});

describe('harness exec --network-allow', { timeout: 60_000 }, () => {
  it('reaches an allowed host through the proxy; another host gets 403 and a line on stderr; no direct way out', async () => {
    reached.length = 0;
    const script = [
      `curl -sS -m 10 ${originUrl()}/allowed`,
      'curl -s -m 10 -o /dev/null -w "denied=%{http_code}\\n" http://denied.invalid/',
      // Around the proxy (no proxy for any host): nothing is reachable from the command's network.
      `curl -s -m 5 --noproxy "*" -o /dev/null ${originUrl()}/direct; echo "direct=$?"`,
      'test -n "$HTTP_PROXY" && echo proxied',
    ].join('; ');
    const result = await sh(`h exec --network-allow 127.0.0.1 -- bash -c '${script}'`);
    expect(result.stdout).toBe('origin says hi\ndenied=403\ndirect=7\nproxied\n');
    expect(result.code).toBe(0);
    expect(result.stderr).toBe('harness: network: refused denied.invalid:80: not named by --network-allow\n');
    expect(reached).toEqual(['/allowed']);
  });

  it('--network-deny wins over an allowed pattern; with --sandbox the disk stays confined too', async () => {
    reached.length = 0;
    const script = [
      `curl -sS -m 10 ${originUrl()}/sandboxed`,
      'curl -s -m 10 -o /dev/null -w "%{http_code}\\n" http://blocked.example.invalid/',
      'touch /etc/tether-x 2>/dev/null || echo read-only',
    ].join('; ');
    const flags =
      '--network-allow 127.0.0.1 --network-allow "**.example.invalid" --network-deny blocked.example.invalid';
    const result = await sh(`h exec --sandbox workspace-write --cwd "$PWD" ${flags} -- bash -c '${script}'`);
    expect(result).toMatchObject({ code: 0, stdout: 'origin says hi\n403\nread-only\n' });
    expect(result.stderr).toBe('harness: network: refused blocked.example.invalid:80: named by --network-deny\n');
    expect(reached).toEqual(['/sandboxed']);
  });

  it('bad usage is exit 2 with one line that names the flags', async () => {
    const cases: Array<[string, string]> = [
      ['--network-deny x.example', 'harness: --network-deny goes with --network-allow\n'],
      [
        '--sandbox read-only --network --network-allow x.example',
        'harness: --network lets the command reach any host, --network-allow only the hosts it names: choose one\n',
      ],
      [
        '--network-allow "*"',
        'harness: --network-allow: "*" is not a host name, an address, or *.domain / **.domain\n',
      ],
      ['-d --network-allow x.example', 'harness: --network-allow does not go with --detach\n'],
    ];
    for (const [flags, stderr] of cases) {
      expect(await sh(`h exec ${flags} -- true`)).toMatchObject({ code: 2, stdout: '', stderr });
    }
  });
});
