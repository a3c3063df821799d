/**
 * `harness exec --network-allow HOST` through the whole product path (the harness bin → registry → relay → our
 * executor in remote mode): the command reaches the hosts named, through the managed proxy the executor runs
 * for it (capability `networkProxyLaunch`), and nothing else; what the proxy refused is said on stderr.
 */
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { repoRoot, type Stack, startStack } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { harnessScript, quote, useTerminals, useWork } from './stack-suite.ts';

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
      ['--network-deny x.example', 'harness: --network-deny goes with --network-allow or --network-ask\n'],
      [
        '--network-ask -t',
        'harness: --network-ask reads its answers from the terminal, which -t gives to the command: choose one\n',
      ],
      ['-d --network-ask', 'harness: --network-ask does not go with --detach\n'],
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
    // Without a controlling terminal (setsid) there is nobody to ask: said before anything runs.
    expect(await sh('setsid "$NODE" "$BIN" exec --network-ask -- true')).toMatchObject({
      code: 2,
      stdout: '',
      stderr: 'harness: --network-ask asks on the terminal, and there is none (/dev/tty: ENXIO)\n',
    });
  });
});

describe('harness exec --network-ask, at a terminal', { timeout: 60_000 }, () => {
  const startTerminal = useTerminals();

  it('asks on the terminal about each host not allowed (stdout redirected, still asked); the answer decides', async () => {
    reached.length = 0;
    const script = [
      `curl -sS -m 10 ${originUrl()}/allowed`,
      'curl -s -m 30 -o /dev/null -D - http://no.invalid/ | tr -d "\\r" | grep -i ^x-proxy-error',
      'curl -s -m 30 -o /dev/null -D - http://yes.invalid/ | tr -d "\\r" | grep -i ^x-proxy-error',
    ].join('; ');
    const harness = [process.execPath, join(repoRoot(), 'apps', 'harness', 'dist', 'main.js')].map(quote).join(' ');
    const tmux = await startTerminal({
      command: `${harness} exec --network-ask --network-allow 127.0.0.1 -- bash -c ${quote(script)} > out.txt 2> err.txt`,
      cwd: work,
      cols: 120,
      rows: 20,
      env: {
        TETHER_HARNESS_REGISTRY: stack.registryUrl,
        TETHER_HARNESS_ENVIRONMENT_ID: ENVIRONMENT,
        TETHER_HARNESS_API_KEY: stack.keys.harness,
        TETHER_CONFIG: join(work, 'no-config.toml'),
      },
    });
    await tmux.waitFor('harness: network: let the command reach no.invalid:80 (http)? [y/N]');
    await tmux.send('n', { literal: true });
    await tmux.send('Enter');
    await tmux.waitFor('harness: network: let the command reach yes.invalid:80 (http)? [y/N]');
    await tmux.send('y', { literal: true });
    await tmux.send('Enter');
    expect(await tmux.waitForExit(25_000)).toBe(0);
    // The allowed host was not asked about; "no" is a policy refusal; "yes" let yes.invalid through to the
    // proxy's own check, where a name that resolves to no public address is refused.
    expect(await readFile(join(work, 'out.txt'), 'utf8')).toBe(
      'origin says hi\nx-proxy-error: blocked-by-policy\nx-proxy-error: blocked-by-allowlist\n',
    );
    expect(await readFile(join(work, 'err.txt'), 'utf8')).toBe(
      'harness: network: refused no.invalid:80: you answered no\n' +
        'harness: network: refused yes.invalid:80: a local or private address (allow it by its exact name or address)\n',
    );
    expect(reached).toEqual(['/allowed']);
  });
});
