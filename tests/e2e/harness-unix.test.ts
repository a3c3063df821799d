/**
 * The harness behaves like a Unix tool and like ssh (issue 32), through the whole product path: the harness
 * bin → registry bin → relay bin → our executor in remote mode, run by a real shell with real pipes, and at a
 * real terminal (a private tmux server).
 *
 * - A closed stdout (`| head`) ends exec, cat, ls and attach at once and quietly with 141 (128+SIGPIPE), and
 *   stops the remote process exec started (attach leaves its detached process running).
 * - Stdin that is not a terminal is forwarded as ssh forwards it (`< file`, `echo … |`); `-n` keeps it closed;
 *   at a terminal nothing changes.
 * - Exit codes as the help promises (1 for a local failure such as a missing local file, 255 only when the
 *   connection fails), and errors that name the cause and the thing (the path, the environment, the missing
 *   argument).
 * - `--connect-timeout` bounds every phase of connecting: the registry call, the relay socket, the handshake.
 * - `cp -r` keeps a new file's mode (less the umask), and skips and names each symbolic link both ways.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { generateIdentity, publicKeyToJson, SECURITY_PROFILE_HYBRID_IK_V1 } from '@tether/noise';
import { findProcesses, repoRoot, type Stack, startStack, type Tmux, waitUntil } from '@tether/test-kit';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { harnessScript, quote, useTerminals, useWork } from './stack-suite.ts';

const ENVIRONMENT = 'unix-e2e';
const bin = join(repoRoot(), 'apps', 'harness', 'dist', 'main.js');
let stack: Stack;
// Every remote command of these tests runs in `work`: none may be left.
const work = useWork('tether-harness-unix-', () => stack);

/** Runs `script` in bash with `h` as the harness bin (harnessScript, on this file's environment). */
const sh = (script: string, env: NodeJS.ProcessEnv = {}) => harnessScript(stack, ENVIRONMENT, work, script, env);

/** Ends a script with the status of its pipeline's first command (the harness), not head's. */
// biome-ignore lint/suspicious/noTemplateCurlyInString: bash's parameter expansion, for the script
const FIRST_STATUS = '; exit "${PIPESTATUS[0]}"';

const sha256 = (data: Buffer | string) => createHash('sha256').update(data).digest('hex');
/** The remote processes still running in `dir` (every remote command of these tests runs there). */
const runningIn = (dir: string) => findProcesses({ cwdUnder: dir });

beforeAll(async () => {
  stack = await startStack();
  await stack.startExecutor('tether', ENVIRONMENT);
  writeFileSync(join(work, 'big'), randomBytes(4 * 1024 * 1024));
  mkdirSync(join(work, 'many'));
  // More names than the harness's stdout pipe holds once it is raised for bulk output (1 MiB): 8000 × 206
  // bytes, so that ls is still writing when head has gone (with 132 KB it sometimes wrote all before).
  for (let i = 0; i < 8000; i++)
    writeFileSync(join(work, 'many', `${String(i).padStart(4, '0')}-${'x'.repeat(200)}`), '');
}, 120_000);

describe('a closed stdout ends the command at once and quietly, with 141 (128+SIGPIPE)', { timeout: 60_000 }, () => {
  it('harness exec -- seq 1 1000000 | head -2', async () => {
    const result = await sh(`h exec --cwd "$W" -- seq 1 1000000 | head -2${FIRST_STATUS}`);
    expect(result).toMatchObject({ code: 141, stdout: '1\n2\n', stderr: '' });
  });

  it('the remote process is stopped at once, as SIGPIPE stops the writer of a local pipeline', async () => {
    const dir = mkdtempSync(join(work, 'yes-'));
    const result = await sh(`h exec --cwd "${dir}" -- yes | head -1${FIRST_STATUS}`);
    expect(result).toMatchObject({ code: 141, stdout: 'y\n', stderr: '' });
    // Not left to the session's expiry (30 s): gone within a moment of the harness.
    await waitUntil(async () => runningIn(dir).length === 0, '`yes` on the executor to be stopped', 3_000, 50);
  });

  it('harness cat ENV:/file | head -c 10', async () => {
    const result = await sh(`h cat ${ENVIRONMENT}:"$W/big" | head -c 10${FIRST_STATUS}`);
    expect(result.code).toBe(141);
    expect(result.stderr).toBe('');
    expect(Buffer.from(result.stdout, 'latin1')).toEqual(readFileSync(join(work, 'big')).subarray(0, 10));
  });

  it('harness ls ENV:/dir | head -1', async () => {
    const result = await sh(`h ls ${ENVIRONMENT}:"$W/many" | head -1${FIRST_STATUS}`);
    expect(result).toMatchObject({ code: 141, stdout: `0000-${'x'.repeat(200)}\n`, stderr: '' });
  });

  it('harness attach ID | head -2 detaches quietly; the detached process goes on', async () => {
    const started = await sh('h exec -d --cwd "$W" -- sh -c "while :; do echo line; sleep 0.01; done"');
    expect(started.code).toBe(0);
    const id = started.stdout.trim();
    try {
      const result = await sh(`h attach ${id} | head -2${FIRST_STATUS}`);
      expect(result).toMatchObject({ code: 141, stdout: 'line\nline\n', stderr: '' });
      const ps = await sh('h ps');
      expect(ps.stdout).toMatch(new RegExp(`^${id}\\s+running`, 'm'));
    } finally {
      await sh(`h kill -s KILL ${id}`);
    }
  });
});

describe('stdin that is not a terminal is forwarded, as ssh forwards it', { timeout: 60_000 }, () => {
  it('echo hello | harness exec -- cat; -i is still accepted', async () => {
    expect(await sh('echo hello | h exec --cwd "$W" -- cat')).toMatchObject({ code: 0, stdout: 'hello\n', stderr: '' });
    expect(await sh('echo again | h exec -i --cwd "$W" -- cat')).toMatchObject({ code: 0, stdout: 'again\n' });
  });

  it('harness exec -- sha256sum < file, and a file through cat | sha256sum', async () => {
    const digest = sha256(readFileSync(join(work, 'big')));
    const hashed = await sh('h exec --cwd "$W" -- sha256sum < "$W/big"');
    expect(hashed).toMatchObject({ code: 0, stdout: `${digest}  -\n`, stderr: '' });
    const through = await sh(`h exec --cwd "$W" -- cat < "$W/big" | sha256sum${FIRST_STATUS}`);
    expect(through).toMatchObject({ code: 0, stdout: `${digest}  -\n`, stderr: '' });
  });

  it('< /dev/null gives the process an open stdin at its end (not the null device), as any empty stdin', async () => {
    const run = 'h exec --cwd "$W" -- sh -c \'cat; test -c /dev/stdin || echo ended\'';
    expect(await sh(`${run} < /dev/null`)).toMatchObject({ code: 0, stdout: 'ended\n', stderr: '' });
    expect(await sh(`: | ${run}`)).toMatchObject({ code: 0, stdout: 'ended\n', stderr: '' });
    expect(await sh(`h exec -n --cwd "$W" -- sh -c 'test -c /dev/stdin && echo null' < /dev/null`)).toMatchObject({
      code: 0,
      stdout: 'null\n',
    });
  });

  it('-n keeps it closed (as ssh -n); -n with -i is bad usage', async () => {
    expect(await sh('h exec -n --cwd "$W" -- cat < "$W/big"')).toMatchObject({ code: 0, stdout: '', stderr: '' });
    const both = await sh('h exec -n -i --cwd "$W" -- cat < "$W/big"');
    expect(both.code).toBe(2);
    expect(both.stderr).toBe('harness: -n (--no-stdin) and -i (--interactive) contradict each other\n');
  });
});

describe('a pipe on stdout is raised to 1 MiB once bulk output comes, so a slower reader finds more waiting', {
  timeout: 60_000,
}, () => {
  // The reader's side asks the kernel for its stdin pipe's capacity (F_GETPIPE_SZ, through the addon's
  // growPipe with 0, which changes nothing) after the first output has arrived.
  const nativePipe = join(repoRoot(), 'packages', 'native-pipe', 'dist', 'index.js');
  const capacity = `"$NODE" --input-type=module -e "import { loadNativePipe } from '${nativePipe}'; console.log(loadNativePipe().growPipe(0, 0))"`;

  it('harness exec -- head -c 4M /dev/zero | reader: 1 MiB, and every byte arrives', async () => {
    const reader = `{ head -c 65536 > /dev/null; ${capacity}; wc -c; }`;
    const result = await sh(`h exec --cwd "$W" -- head -c 4194304 /dev/zero | ${reader}${FIRST_STATUS}`);
    expect(result).toMatchObject({ code: 0, stdout: `${1024 * 1024}\n${4 * 1024 * 1024 - 65536}\n`, stderr: '' });
  });

  it('small output leaves the pipe as it was', async () => {
    const result = await sh(`h exec --cwd "$W" -- echo hi | { cat; ${capacity}; }${FIRST_STATUS}`);
    expect(result).toMatchObject({ code: 0, stdout: `hi\n${64 * 1024}\n`, stderr: '' });
  });
});

describe('at a terminal', { timeout: 60_000 }, () => {
  const startTerminal = useTerminals();
  let scripts = 0;
  /** `line` run by bash in a fresh tmux window, with `h` as the harness bin and the stack's variables. */
  async function terminal(line: string): Promise<Tmux> {
    const script = join(work, `terminal-${++scripts}.sh`);
    writeFileSync(script, `h() { ${quote(process.execPath)} ${quote(bin)} "$@"; }\n${line}\n`);
    return startTerminal({
      command: `bash ${quote(script)}`,
      cwd: work,
      env: {
        TETHER_HARNESS_REGISTRY: stack.registryUrl,
        TETHER_HARNESS_ENVIRONMENT_ID: ENVIRONMENT,
        TETHER_HARNESS_API_KEY: stack.keys.harness,
        TETHER_CONFIG: join(work, 'no-config.toml'),
        TETHER_REUSE: 'no',
      },
    });
  }

  it('a terminal on stdin is not forwarded without -t or -i: exec -- cat ends by itself, as before', async () => {
    const tmux = await terminal(`h exec --cwd ${quote(work)} -- cat; echo "status=$?"`);
    await tmux.waitFor('status=0', 20_000);
  });

  it('with -i the keys reach the process, as before', async () => {
    const tmux = await terminal(`h exec -i --cwd ${quote(work)} -- sh -c 'read l; echo "got=$l"'; echo "status=$?"`);
    await tmux.send(['abc', 'Enter']);
    await tmux.waitFor(/got=abc[\s\S]*status=0/, 20_000);
  });

  it('exec -t -- yes | head -1: 141, no trace, and the terminal back in its cooked mode', async () => {
    const tmux = await terminal(
      `h exec -t --cwd ${quote(work)} -- yes | head -1; echo "status=\${PIPESTATUS[0]}"; stty -a | grep -o -w -- '-\\?icanon' | sed 's/^/mode=/'`,
    );
    const screen = await tmux.waitFor(/mode=-?icanon/, 20_000);
    expect(screen).toContain('status=141');
    expect(screen).toContain('mode=icanon');
    expect(screen).not.toMatch(/EPIPE|Error|at /);
  });
});

describe('exit codes and errors that name the cause and the thing', { timeout: 60_000 }, () => {
  it('a missing local source exits 1 (not 255) and names the path', async () => {
    const result = await sh(`h cp "$W/no-such-file" ${ENVIRONMENT}:/tmp/x`);
    expect(result).toMatchObject({
      code: 1,
      stdout: '',
      stderr: `harness: ${work}/no-such-file: No such file or directory\n`,
    });
  });

  it('a remote path that is missing is named in cp, cat and ls', async () => {
    const cp = await sh(`h cp "$W/big" ${ENVIRONMENT}:/nonexistent/dir/x`);
    expect(cp).toMatchObject({
      code: 1,
      stderr: `harness: ${ENVIRONMENT}:/nonexistent/dir/x: No such file or directory\n`,
    });
    const cat = await sh(`h cat ${ENVIRONMENT}:"$W/nope"`);
    expect(cat).toMatchObject({ code: 1, stderr: `harness: ${ENVIRONMENT}:${work}/nope: No such file or directory\n` });
    const ls = await sh(`h ls ${ENVIRONMENT}:"$W/nope"`);
    expect(ls).toMatchObject({ code: 1, stderr: `harness: ${ENVIRONMENT}:${work}/nope: No such file or directory\n` });
  });

  it('an environment no executor registered is named as such (255)', async () => {
    const result = await sh('h exec --environment-id unix-no-such-env -- true');
    expect(result).toMatchObject({
      code: 255,
      stderr: `harness: no environment "unix-no-such-env" at the registry ${stack.registryUrl}: no executor has registered it (HTTP 404 environment_not_registered)\n`,
    });
  });

  it('an environment the key may not use is named as such, not as a refused key (255)', async () => {
    const key = await stack.createKey('harness', 'unix-someone-else');
    const result = await sh('h exec -- true', { TETHER_HARNESS_API_KEY: key });
    expect(result.code).toBe(255);
    expect(result.stderr).toMatch(
      new RegExp(`^harness: environment "${ENVIRONMENT}" is not one this API key may use `),
    );
    expect(result.stderr).not.toContain('refused the harness API key');
    expect(result.stderr.split('\n')).toHaveLength(2);
  });

  it('a missing argument is one line and a hint, not the whole help (2)', async () => {
    expect(await sh('h exec')).toMatchObject({
      code: 2,
      stdout: '',
      stderr: 'harness exec: missing the command to run (harness exec [options] -- CMD…; see harness exec --help)\n',
    });
    expect(await sh('h cp "$W/big"')).toMatchObject({
      code: 2,
      stderr:
        'harness cp: missing the destination (harness cp [options] <source> <destination>; see harness cp --help)\n',
    });
  });
});

describe('--connect-timeout bounds every phase of connecting', { timeout: 60_000 }, () => {
  const servers: Array<{ close(): void }> = [];
  afterEach(() => {
    for (const server of servers.splice(0)) server.close();
  });

  /** A loopback TCP server that accepts and never says a word; its URL. */
  async function silentServer(): Promise<number> {
    const sockets = new Set<Socket>();
    const server: Server = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => undefined);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push({
      close: () => {
        for (const socket of sockets) socket.destroy();
        server.close();
      },
    });
    return (server.address() as { port: number }).port;
  }

  /** A registry stand-in whose /connect answers a well-formed bundle pointing at `relayUrl`. */
  async function registryFor(relayUrl: string): Promise<string> {
    const executorKey = publicKeyToJson(generateIdentity().publicKey);
    const server = createHttpServer((req, res) => {
      const id = /^\/cloud\/environment\/([^/]+)\/connect$/.exec(req.url ?? '')?.[1];
      req.resume();
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          environment_id: id,
          url: `${relayUrl}/stream?sig=x`,
          security_profile: SECURITY_PROFILE_HYBRID_IK_V1,
          executor_registration_id: 'reg-1',
          executor_public_key: executorKey,
          harness_key_authorization: 'auth-1',
        }),
      );
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    servers.push(server);
    return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  }

  const within = async (registryUrl: string, bound = 2_500) => {
    const result = await sh('h exec --connect-timeout 1 -- true', { TETHER_HARNESS_REGISTRY: registryUrl });
    expect(result.code).toBe(255);
    expect(result.stderr).toMatch(/^harness: could not connect within 1000 ms/);
    expect(result.ms).toBeLessThan(bound);
    return result;
  };

  it('a registry nobody listens on', async () => {
    const port = await silentServer();
    servers.pop()?.close();
    const result = await within(`http://127.0.0.1:${port}`);
    expect(result.stderr).toContain('cannot reach the registry');
  });

  it('a registry that accepts and never answers', async () => {
    await within(`http://127.0.0.1:${await silentServer()}`);
  });

  it('a relay that never answers the WebSocket upgrade', async () => {
    await within(await registryFor(`ws://127.0.0.1:${await silentServer()}`));
  });

  it('a relay that opens the socket and never relays the handshake', async () => {
    const relay = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise((resolve) => relay.once('listening', resolve));
    servers.push(relay);
    await within(await registryFor(`ws://127.0.0.1:${(relay.address() as { port: number }).port}`));
  });
});

describe('cp -r keeps new files’ modes and names each symbolic link it skips, both ways', { timeout: 60_000 }, () => {
  const mode = (path: string) => statSync(path).mode & 0o777;
  const umask = process.umask();

  it('a new file keeps its mode less the umask, up and down; an existing one keeps its own', async () => {
    const source = join(work, 'modes');
    mkdirSync(source);
    writeFileSync(join(source, 'run.sh'), '#!/bin/sh\necho hi\n');
    chmodSync(join(source, 'run.sh'), 0o755);
    writeFileSync(join(source, 'private'), 'secret');
    chmodSync(join(source, 'private'), 0o700);
    writeFileSync(join(source, 'plain'), 'plain');
    chmodSync(join(source, 'plain'), 0o644);
    writeFileSync(join(source, 'big-exec'), randomBytes(600 * 1024)); // streamed, not batched
    chmodSync(join(source, 'big-exec'), 0o750);
    const up = await sh(`h cp -r -q "$W/modes" ${ENVIRONMENT}:"$W/modes-up"`);
    expect(up).toMatchObject({ code: 0, stderr: '' });
    const down = await sh(`h cp -r -q ${ENVIRONMENT}:"$W/modes" "$W/modes-down"`);
    expect(down).toMatchObject({ code: 0, stderr: '' });
    for (const [name, bits] of Object.entries({ 'run.sh': 0o755, private: 0o700, plain: 0o644, 'big-exec': 0o750 })) {
      expect(mode(join(work, 'modes-up', name)).toString(8), `up ${name}`).toBe((bits & ~umask).toString(8));
      expect(mode(join(work, 'modes-down', name)).toString(8), `down ${name}`).toBe((bits & ~umask).toString(8));
    }
    writeFileSync(join(work, 'existing'), 'old');
    chmodSync(join(work, 'existing'), 0o640);
    expect((await sh(`h cp -q "$W/modes/private" ${ENVIRONMENT}:"$W/existing"`)).code).toBe(0);
    expect(mode(join(work, 'existing')).toString(8)).toBe('640');
    expect(readFileSync(join(work, 'existing'), 'utf8')).toBe('secret');
  });

  it('each link in the tree is skipped and named, up and down; none is made or followed', async () => {
    const source = join(work, 'links');
    mkdirSync(join(source, 'sub'), { recursive: true });
    writeFileSync(join(source, 'file'), 'f');
    writeFileSync(join(source, 'sub', 'inner'), 'i');
    symlinkSync('file', join(source, 'to-file'));
    symlinkSync('sub', join(source, 'to-sub'));
    symlinkSync('nowhere', join(source, 'dangling'));
    const skipped = (prefix: string) =>
      ['dangling', 'to-file', 'to-sub'].map(
        (name) => `harness: skipped the symbolic link ${prefix}${source}/${name} (cp -r copies no links)`,
      );
    const up = await sh(`h cp -r ${source} ${ENVIRONMENT}:"$W/links-up"`);
    expect(up.code).toBe(0);
    const upLines = up.stderr.trim().split('\n');
    expect(upLines.slice(0, 3)).toEqual(skipped(''));
    expect(upLines[3]).toMatch(/^copied 2 file\(s\) in 2 dir\(s\), .*; skipped 3 \(named above\)$/);
    expect(readdirSync(join(work, 'links-up')).sort()).toEqual(['file', 'sub']);

    const down = await sh(`h cp -r ${ENVIRONMENT}:${source} "$W/links-down"`);
    expect(down.code).toBe(0);
    const downLines = down.stderr.trim().split('\n');
    expect(downLines.slice(0, 3)).toEqual(skipped(`${ENVIRONMENT}:`));
    expect(downLines[3]).toMatch(/^copied 2 file\(s\) in 2 dir\(s\), .*; skipped 3 \(named above\)$/);
    expect(readdirSync(join(work, 'links-down')).sort()).toEqual(['file', 'sub']);
    expect(existsSync(join(work, 'links-down', 'to-file'))).toBe(false);
  });
});
