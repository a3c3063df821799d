// Sandboxing (`sandbox` on process/start and fs/*), differential: the same scenarios against Codex's
// exec-server (its codex-linux-sandbox helper on PATH, bubblewrap on the host) and ours, every profile Codex's
// agent sends and the others the schema has. Each scenario's outcome (exit code, sandboxDenied, the
// denial's words; an fs call's code and message) must be the same on both (CODEX-FINDINGS.md §21).

import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import {
  b64,
  codexSandboxPath,
  collectUntilClosed,
  fileUri,
  findProcesses,
  type TestClient,
  waitUntil,
} from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KIND_CASES, useHarness } from './support.ts';

const special = (kind: string, extra: Record<string, unknown> = {}) => ({
  type: 'special',
  value: { kind, ...extra },
});

type Profile = { permissions: unknown; network?: never };

/** What Codex's agent sends for `-s workspace-write` (network as given) and `-s read-only`. */
function workspaceWrite(network: 'restricted' | 'enabled') {
  return {
    type: 'managed',
    file_system: {
      type: 'restricted',
      entries: [
        { path: special('root'), access: 'read' },
        { path: special('project_roots'), access: 'write' },
        { path: special('slash_tmp'), access: 'write' },
        { path: special('tmpdir'), access: 'write' },
        ...['.git', '.agents', '.codex'].map((subpath) => ({
          path: special('project_roots', { subpath }),
          access: 'read',
          missing_path_behavior: 'skip',
        })),
      ],
    },
    network,
  };
}
const READ_ONLY = {
  type: 'managed',
  file_system: { type: 'restricted', entries: [{ path: special('root'), access: 'read' }] },
  network: 'restricted',
};

const PROFILES: Record<string, unknown> = {
  'workspace-write': workspaceWrite('restricted'),
  // A deny glob (expanded at launch into the files it matches): the secret in the workspace is hidden.
  'workspace-write + deny glob': (root: string) => {
    const profile = workspaceWrite('restricted');
    profile.file_system.entries.push({
      path: { type: 'glob_pattern', pattern: `${root}/**/secret*` },
      access: 'deny',
    } as never);
    return profile;
  },
  'workspace-write + network': workspaceWrite('enabled'),
  'read-only': READ_ONLY,
  'managed, unrestricted filesystem': { type: 'managed', file_system: { type: 'unrestricted' }, network: 'restricted' },
  disabled: { type: 'disabled' },
  external: { type: 'external', network: 'restricted' },
};
void ({} as Profile);

interface Outcome {
  exitCode: number | null;
  sandboxDenied: boolean | null;
  /** The output with the run's own paths and ports taken out, so both executors' can be compared. */
  output: string;
}

describe('sandbox: the same allow/deny table on both executors', { timeout: 120_000 }, () => {
  const h = useHarness();
  let listener: Server;
  let port = 0;
  const tables = new Map<string, Map<string, unknown>>();
  const globResults = new Map<string, Record<string, unknown>>();
  // Outside /tmp, which workspace-write makes writable: the workspaces and the directories outside them.
  const scratch = mkdtempSync('/var/tmp/tether-sandbox-');
  // Codex's exec-server finds its helper (the codex-linux-sandbox alias) on the command's PATH.
  const path = `${codexSandboxPath(scratch)}`.replace(/:.*$/, '');

  beforeAll(async () => {
    listener = createServer((socket) => {
      socket.on('error', () => undefined);
      socket.end('hello\n');
    });
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    port = (listener.address() as { port: number }).port;
  });
  afterAll(async () => {
    await new Promise((resolve) => listener.close(resolve));
    rmSync(scratch, { recursive: true, force: true });
  });

  /** A fresh workspace (with a .git), a directory outside it, and a TMPDIR, for one peer kind. */
  function layout(kind: string) {
    const base = join(scratch, `${kind}-${Math.random().toString(36).slice(2, 8)}`);
    const root = join(base, 'workspace');
    const outside = join(base, 'outside');
    const tmp = join(base, 'tmpdir');
    for (const dir of [root, join(root, '.git'), outside, tmp]) mkdirSync(dir, { recursive: true });
    writeFileSync(join(outside, 'secret'), 'top secret\n');
    mkdirSync(join(root, 'sub'));
    writeFileSync(join(root, 'sub', 'secret-key'), 'workspace secret\n');
    symlinkSync(outside, join(root, 'link-out'));
    return { base, root, outside, tmp };
  }

  /** `process/start` params for `argv` in `cwd`, under `sandbox` (null: none). */
  const startParams = (
    processId: string,
    argv: string[],
    cwd: string,
    sandbox: unknown,
    env: Record<string, string> = {},
  ) => ({
    processId,
    argv,
    cwd: fileUri(cwd),
    env: { PATH: `${path}:/usr/bin:/bin`, ...env },
    tty: false,
    pipeStdin: false,
    arg0: null,
    ...(sandbox === null ? {} : { sandbox }),
  });
  /** Codex's workspace-write context for the workspace `root`. */
  const workspaceWriteAt = (root: string) => ({
    permissions: PROFILES['workspace-write'],
    cwd: fileUri(root),
    workspaceRoots: [fileUri(root)],
    windowsSandboxLevel: 'disabled',
  });

  async function run(
    client: TestClient,
    id: string,
    script: string,
    cwd: string,
    env: Record<string, string>,
    sandbox: unknown,
  ) {
    const started = await client.request(
      'process/start',
      startParams(id, ['/bin/bash', '-c', script], cwd, sandbox, env),
    );
    if (started.error) return { startError: started.error };
    const sandboxType = (started.result as { sandboxType?: string }).sandboxType;
    const collected = await collectUntilClosed(client, id);
    const read = (await client.call('process/read', { processId: id, afterSeq: 0, maxBytes: 1 })) as {
      sandboxDenied: boolean;
    };
    return {
      sandboxType,
      exitCode: collected.exitCode,
      sandboxDenied: read.sandboxDenied,
      output: collected.output + collected.stderr,
    };
  }

  it.each(KIND_CASES)('%s: every profile, processes and fs calls', async (_label, kind) => {
    const { client, initializeResult } = await h.session(kind, 'ws');
    if (kind === 'tether') {
      // Ours says what it can enforce (Codex advertises no capabilities of ours).
      const info = initializeResult.environmentInfo as { capabilities?: Record<string, unknown> } | undefined;
      expect(info?.capabilities?.processSandbox).toBe(true);
    }
    const table = new Map<string, unknown>();
    let n = 0;
    for (const [name, permissions] of Object.entries(PROFILES)) {
      const { base, root, outside, tmp } = layout(kind);
      const sandbox = {
        permissions: typeof permissions === 'function' ? permissions(root) : permissions,
        cwd: fileUri(root),
        workspaceRoots: [fileUri(root)],
        windowsSandboxLevel: 'disabled',
        useLegacyLandlock: false,
      };
      const clean = (text: string) =>
        text
          .replaceAll(base, '<base>')
          .replaceAll(String(port), '<port>')
          .replace(/\/bin\/sh: \d+: /g, 'sh: ');
      const scenarios: Record<string, string> = {
        'write inside the workspace': 'touch inside && echo ok',
        'write outside every writable root': `touch ${outside}/x`,
        'write /tmp': `f=/tmp/tether-sandbox-$$; touch $f && rm $f && echo ok`,
        'write $TMPDIR': 'touch "$TMPDIR/x" && echo ok',
        'write .git under the workspace': 'touch .git/x',
        'create .codex under the workspace': 'mkdir .codex/x',
        'write through a symlink out of the workspace': 'touch link-out/x',
        'write through /proc/self/root': `touch /proc/self/root${outside}/y`,
        'read outside': `cat ${outside}/secret`,
        'read a secret in the workspace': 'cat sub/secret-key',
        'tcp to a local listener': `exec 3<>/dev/tcp/127.0.0.1/${port} && echo connected`,
        'exit 3 by itself': 'exit 3',
        'write through a symlink in /tmp to outside': `l=/tmp/tether-sbx-link-$$; ln -s ${outside} $l; touch $l/z; r=$?; rm -f $l; exit $r`,
        'a double-forked child': '(setsid sleep 1234.5 >/dev/null 2>&1 &); echo forked',
      };
      for (const [scenario, script] of Object.entries(scenarios)) {
        const result = await run(client, `p${++n}`, `exec 2>&1; ${script}`, root, { TMPDIR: tmp }, sandbox);
        if ('startError' in result) table.set(`${name}: ${scenario}`, { startError: result.startError });
        else
          table.set(`${name}: ${scenario}`, {
            sandboxType: result.sandboxType,
            exitCode: result.exitCode,
            sandboxDenied: result.sandboxDenied,
            output: clean(result.output).trim(),
          } satisfies Outcome & { sandboxType?: string });
      }
      // A sandboxed process's children die with it, double-forked or not (unconfined ones are the executor's
      // reaper's business, and outlive it on Codex's).
      if (name.startsWith('workspace-write') || name === 'read-only') {
        await waitUntil(
          () => findProcesses({ commandIncludes: ['sleep 1234.5'] }).length === 0,
          'the child to die',
          5_000,
        );
      } else {
        for (const p of findProcesses({ commandIncludes: ['sleep 1234.5'] })) {
          try {
            process.kill(p.pid, 'SIGKILL');
          } catch {
            // it ended between the scan and the kill
          }
        }
      }
      // Nothing the denied writes tried landed on the host, and the protected names made for the sandbox are gone.
      table.set(`${name}: host outside`, readdirSync(outside).sort());
      table.set(
        `${name}: host workspace`,
        readdirSync(root)
          .sort()
          .filter((f) => !f.startsWith('inside')),
      );
      const fsCall = async (method: string, params: Record<string, unknown>) => {
        const response = await client.request(method, { ...params, sandbox });
        return response.error
          ? { error: { ...response.error, message: clean(response.error.message) } }
          : { result: response.result };
      };
      table.set(
        `${name}: fs/readFile a secret in the workspace`,
        await fsCall('fs/readFile', { path: fileUri(join(root, 'sub', 'secret-key')) }),
      );
      table.set(
        `${name}: fs/writeFile inside`,
        await fsCall('fs/writeFile', { path: fileUri(join(root, 'f')), dataBase64: b64('x') }),
      );
      table.set(
        `${name}: fs/writeFile outside`,
        await fsCall('fs/writeFile', { path: fileUri(join(outside, 'f')), dataBase64: b64('x') }),
      );
      table.set(
        `${name}: fs/writeFile .git`,
        await fsCall('fs/writeFile', { path: fileUri(join(root, '.git', 'f')), dataBase64: b64('x') }),
      );
      table.set(
        `${name}: fs/readFile outside`,
        await fsCall('fs/readFile', { path: fileUri(join(outside, 'secret')) }),
      );
      table.set(
        `${name}: fs/createDirectory outside`,
        await fsCall('fs/createDirectory', { path: fileUri(join(outside, 'd')) }),
      );
      table.set(`${name}: fs/remove outside`, await fsCall('fs/remove', { path: fileUri(join(outside, 'secret')) }));
      table.set(
        `${name}: fs/copy into outside`,
        await fsCall('fs/copy', {
          sourcePath: fileUri(join(root, 'f')),
          destinationPath: fileUri(join(outside, 'copy')),
          recursive: false,
        }),
      );
      table.set(
        `${name}: fs/getMetadata outside`,
        (await fsCall('fs/getMetadata', { path: fileUri(join(outside, 'secret')) })).error ?? 'ok',
      );
      const open = async (handleId: string, path: string, mode: string) =>
        fsCall('fs/open', { handleId, path: fileUri(path), mode });
      table.set(`${name}: fs/open read outside`, await open('r1', join(outside, 'secret'), 'read'));
      table.set(`${name}: fs/open replace outside`, await open('w1', join(outside, 'opened'), 'replace'));
      const inside = await open('w2', join(root, 'opened'), 'replace');
      table.set(`${name}: fs/open replace inside`, inside);
      if (inside.result) {
        await client.call('fs/writeBlock', { handleId: 'w2', offset: 0, chunk: b64('block') });
        await client.call('fs/close', { handleId: 'w2' });
        table.set(`${name}: fs/open replace inside wrote`, readFileSync(join(root, 'opened'), 'utf8'));
      }
      await client.request('fs/close', { handleId: 'r1' });
      await client.request('fs/close', { handleId: 'w1' });
      table.set(`${name}: host outside after fs`, readdirSync(outside).sort());
      table.set(`${name}: /tmp tether files`, existsSync('/tmp/.git') ? 'has /tmp/.git' : 'none');
    }
    tables.set(kind, table);
  });

  // Ours: the executor's watchdog (and bubblewrap's --die-with-parent and PID namespace) end the sandbox.
  it('tether: a sandboxed process and its children die with a killed executor', async () => {
    const kind = 'tether';
    const { peer, client } = await h.session(kind, 'ws');
    const { root } = layout(kind);
    const started = await client.request(
      'process/start',
      startParams(
        'doomed',
        ['/bin/bash', '-c', '(setsid sleep 1236.5 >/dev/null 2>&1 &); exec sleep 1237.5'],
        root,
        workspaceWriteAt(root),
      ),
    );
    expect(started.error).toBeUndefined();
    const sleeps = () =>
      findProcesses({ commandIncludes: ['sleep 1236.5', 'sleep 1237.5'] }).filter((p) =>
        p.cmdline.startsWith('sleep '),
      );
    await waitUntil(() => sleeps().length === 2, 'both sleeps to run', 10_000);
    process.kill(peer.pid, 'SIGKILL');
    await waitUntil(() => sleeps().length === 0, 'the sandbox to die with the executor', 10_000);
  });

  it('tether: a start refused before it runs (a known id) leaves no mount point behind', async () => {
    const { client } = await h.session('tether', 'ws');
    const { root } = layout('tether');
    const params = startParams('once', ['/bin/sleep', '0.3'], root, workspaceWriteAt(root));
    expect((await client.request('process/start', params)).error).toBeUndefined();
    expect((await client.request('process/start', params)).error?.message).toMatch(/already exists/);
    await collectUntilClosed(client, 'once');
    // The missing .codex, .agents and .aws were made as mount points while it ran, and are gone again.
    await waitUntil(() => !existsSync(join(root, '.codex')), 'the mount points to go', 5_000);
    expect(readdirSync(root).sort()).toEqual(['.git', 'link-out', 'sub']);
  });

  // Deny globs, differential: the same tree and the same `glob_pattern` deny on both executors, and which
  // files a workspace-write command can still read. Codex expands the pattern with Rust's globset before launch.
  const GLOB_TREE = [
    'x/*.txt',
    'x/a.txt',
    'x/a',
    'x/b',
    'x/c',
    'x/d',
    'x/ab',
    'x/]',
    'x/?',
    'x/[',
    'x/sub/f',
    'x/{a,b}',
    'x/[a',
    'x/{a,b',
    'x/a\\',
    'k.key',
    'd/k.key',
    'd/e/k.key',
    'd/e/f/k.key',
    'd/.hidden/k.key',
    '.hidden/k.key',
    '.env',
    'a.env',
    'd/b.env',
    'q1.txt',
    'q12.txt',
    'q.txt',
  ];
  /**
   * Pattern (under the workspace unless it starts with `./`, read against the cwd) → the files ours denies, and
   * where Codex 0.171.0 denies something else, what it denies. Each such difference is Codex failing open (a
   * deny entry that denies nothing): ours denies what the pattern names instead.
   */
  const GLOB_CASES: Array<[pattern: string, denied: string[], codexFailsOpen?: string[]]> = [
    ['x/\\*.txt', ['x/*.txt']],
    ['x/[]a]', ['x/]', 'x/a']],
    ['x/[!]a]', ['x/?', 'x/[', 'x/b', 'x/c', 'x/d']],
    ['x/[a-c]', ['x/a', 'x/b', 'x/c']],
    ['x/\\?', ['x/?']],
    ['x/\\[', ['x/[']],
    ['x/[[]', ['x/[']],
    // An unclosed class is literal on both.
    ['x/[a', ['x/[a']],
    ['x/?', ['x/?', 'x/[', 'x/]', 'x/a', 'x/b', 'x/c', 'x/d']],
    [
      'x/*',
      [
        'x/*.txt',
        'x/?',
        'x/[',
        'x/[a',
        'x/]',
        'x/a',
        'x/a.txt',
        'x/a\\',
        'x/ab',
        'x/b',
        'x/c',
        'x/d',
        'x/{a,b',
        'x/{a,b}',
      ],
    ],
    ['x/*/f', ['x/sub/f']],
    ['x/a*', ['x/a', 'x/a.txt', 'x/a\\', 'x/ab']],
    ['**/k.key', ['.hidden/k.key', 'd/.hidden/k.key', 'd/e/f/k.key', 'd/e/k.key', 'd/k.key', 'k.key']],
    ['./**/k.key', ['.hidden/k.key', 'd/.hidden/k.key', 'd/e/f/k.key', 'd/e/k.key', 'd/k.key', 'k.key']],
    ['d/**/k.key', ['d/.hidden/k.key', 'd/e/f/k.key', 'd/e/k.key', 'd/k.key']],
    ['d/**', ['d/.hidden/k.key', 'd/b.env', 'd/e/f/k.key', 'd/e/k.key', 'd/k.key']],
    // `**` inside a component is `*` (globset's reading, so ours too).
    ['d/**k.key', ['d/k.key']],
    ['*.env', ['.env', 'a.env']],
    ['**/*.env', ['.env', 'a.env', 'd/b.env']],
    ['q?.txt', ['q1.txt']],
    // Codex denies nothing for any pattern with braces, nested or not, across a `/` or not, an empty
    // alternative, even an unclosed `{` (not even the file of that literal name), nor for a trailing `\`.
    ['x/{a,b}', ['x/a', 'x/b'], []],
    ['x/{a,{b,c}}', ['x/a', 'x/b', 'x/c'], []],
    ['{q,x/a}*.txt', ['q.txt', 'q1.txt', 'q12.txt', 'x/a.txt'], []],
    ['x/{,a}b', ['x/ab', 'x/b'], []],
    ['x/{a,b', ['x/{a,b'], []],
    ['x/a\\', ['x/a\\'], []],
  ];

  it.each(KIND_CASES)('%s: deny globs', async (_label, kind) => {
    const { client } = await h.session(kind, 'ws');
    const results: Record<string, unknown> = {};
    let n = 0;
    for (const [pattern] of GLOB_CASES) {
      const { root } = layout(kind);
      for (const file of GLOB_TREE) {
        mkdirSync(join(root, file, '..'), { recursive: true });
        writeFileSync(join(root, file), 'x');
      }
      const profile = workspaceWrite('restricted');
      profile.file_system.entries.push({
        path: { type: 'glob_pattern', pattern: pattern.startsWith('./') ? pattern : `${root}/${pattern}` },
        access: 'deny',
      } as never);
      const sandbox = {
        permissions: profile,
        cwd: fileUri(root),
        workspaceRoots: [fileUri(root)],
        windowsSandboxLevel: 'disabled',
      };
      const script = `for f in ${GLOB_TREE.map((f) => `'${f}'`).join(' ')}; do cat -- "$f" >/dev/null 2>&1 || echo "DENIED:$f"; done`;
      const result = await run(client, `g${++n}`, script, root, {}, sandbox);
      results[pattern] =
        'startError' in result
          ? { startError: result.startError }
          : result.output
              .split('\n')
              .filter((l) => l.startsWith('DENIED:'))
              .map((l) => l.slice(7))
              .sort();
    }
    globResults.set(kind, results);
  });

  it.each(KIND_CASES)(
    '%s: a deny glob matching more than 8192 files is refused, not cut short',
    async (_label, kind) => {
      const { client } = await h.session(kind, 'ws');
      const { root } = layout(kind);
      mkdirSync(join(root, 'm'));
      for (let i = 0; i <= 8192; i++) writeFileSync(join(root, 'm', `f${i}.key`), 'x');
      const profile = workspaceWrite('restricted');
      profile.file_system.entries.push({
        path: { type: 'glob_pattern', pattern: `${root}/m/*.key` },
        access: 'deny',
      } as never);
      const sandbox = {
        permissions: profile,
        cwd: fileUri(root),
        workspaceRoots: [fileUri(root)],
        windowsSandboxLevel: 'disabled',
      };
      const result = await run(client, 'many', 'cat m/f0.key m/f8192.key && echo READ', root, {}, sandbox);
      if (kind === 'codex') {
        // Codex starts the process, whose sandbox helper then fails before running the command.
        expect(result).toMatchObject({ exitCode: 1, sandboxDenied: true });
        expect((result as { output: string }).output).toMatch(/glob expansion for .* matched more than 8192 paths/);
      } else {
        expect(result).toEqual({
          startError: expect.objectContaining({ code: -32602, message: expect.stringMatching(/more than 8192 files/) }),
        });
      }
    },
    120_000,
  );

  // Repositories nested in the workspace: a hook planted in one would run at the next unconfined `git` there.
  const NESTED_TARGETS = [
    '.git/hooks/pre-commit',
    'sub/.git/hooks/pre-commit',
    'sub/.git/config',
    'a/b/c/.git/hooks/pre-commit',
    'sub/.codex/config.toml',
    'sub/.agents/notes',
  ];
  const nestedResults = new Map<string, Record<string, unknown>>();

  it.each(KIND_CASES)('%s: nested .git, .codex and .agents under workspace-write', async (_label, kind) => {
    const { client } = await h.session(kind, 'ws');
    const { root } = layout(kind);
    for (const file of NESTED_TARGETS) {
      mkdirSync(join(root, file, '..'), { recursive: true });
      writeFileSync(join(root, file), 'original\n');
    }
    const script = [
      ...NESTED_TARGETS.map((f) => `echo planted >> '${f}' 2>/dev/null && echo "WROTE:${f}" || echo "REFUSED:${f}"`),
      `mkdir sub/.git/hooks/new 2>/dev/null && echo "WROTE:sub/.git/hooks/new" || echo "REFUSED:sub/.git/hooks/new"`,
      `touch sub/other && echo "WROTE:sub/other" || echo "REFUSED:sub/other"`,
    ].join('; ');
    const result = await run(client, 'nested', script, root, {}, workspaceWriteAt(root));
    if ('startError' in result) throw new Error(JSON.stringify(result.startError));
    const outcome: Record<string, unknown> = {};
    for (const line of result.output.split('\n')) {
      const [verdict, file] = line.split(':');
      if ((verdict === 'WROTE' || verdict === 'REFUSED') && file) outcome[file] = verdict;
    }
    for (const file of NESTED_TARGETS) {
      outcome[`host ${file}`] = readFileSync(join(root, file), 'utf8');
    }
    nestedResults.set(kind, outcome);
  });

  it('nested protected names: ours keeps them read-only; codex only the top-level ones', () => {
    const refused = (file: string) => [file, 'REFUSED'];
    const original = (file: string) => [`host ${file}`, 'original\n'];
    expect(nestedResults.get('tether')).toEqual(
      Object.fromEntries([
        ...NESTED_TARGETS.map(refused),
        refused('sub/.git/hooks/new'),
        ['sub/other', 'WROTE'],
        ...NESTED_TARGETS.map(original),
      ]),
    );
    // Codex 0.171.0 protects `.git`, `.codex` and `.agents` at the top of each writable root only: a nested
    // repository's hooks and config, and nested `.codex`/`.agents`, take the planted lines.
    const nested = NESTED_TARGETS.filter((f) => f.includes('/.'));
    expect(nestedResults.get('codex')).toEqual(
      Object.fromEntries([
        refused('.git/hooks/pre-commit'),
        ...nested.map((f) => [f, 'WROTE']),
        ['sub/.git/hooks/new', 'WROTE'],
        ['sub/other', 'WROTE'],
        original('.git/hooks/pre-commit'),
        ...nested.map((f) => [`host ${f}`, 'original\nplanted\n']),
      ]),
    );
  });

  // The seccomp layer, through each executor: what a workspace-write command (network restricted) gets from the
  // calls the filter rules on, next to what the same probe gets unconfined (the kernel's own answer).
  const SYSCALL_PROBE = String.raw`
import ctypes, errno, os, platform, select, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
NR = {'x86_64': {'io_uring_setup': 425, 'ptrace': 101, 'process_vm_readv': 310, 'sendmmsg': 307, 'recvmmsg': 299},
      'aarch64': {'io_uring_setup': 425, 'ptrace': 117, 'process_vm_readv': 270, 'sendmmsg': 269, 'recvmmsg': 243}}[platform.machine()]
def name(e): return errno.errorcode.get(e, str(e))
def call(nr, *args):
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return 'ok' if r >= 0 else name(ctypes.get_errno())
def attempt(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return name(e.errno)
dgram, stream = sys.argv[1], sys.argv[2]
unix_dgram = lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
pair = socket.socketpair()
results = {
    'socket AF_INET': attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
    'socket AF_INET6': attempt(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)),
    'socket AF_NETLINK': attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
    'socket AF_UNIX': attempt(unix_dgram),
    'socketpair AF_UNIX': attempt(socket.socketpair),
    'send on a socketpair': attempt(lambda: pair[0].send(b'x')),
    'getsockname': attempt(lambda: pair[0].getsockname()),
    'getpeername': attempt(lambda: pair[0].getpeername()),
    'bind AF_UNIX (abstract)': attempt(lambda: socket.socket(socket.AF_UNIX).bind('\0tether-probe-%d' % os.getpid())),
    'connect to a host UNIX socket': attempt(lambda: socket.socket(socket.AF_UNIX).connect(stream)),
    'sendto a host UNIX socket': attempt(lambda: unix_dgram().sendto(b'sendto', dgram)),
    'sendmsg to a host UNIX socket': attempt(lambda: unix_dgram().sendmsg([b'sendmsg'], [], 0, dgram)),
    'io_uring_setup': call(NR['io_uring_setup'], 1, 0),
    'ptrace(PTRACE_TRACEME)': call(NR['ptrace'], 0, 0, 0, 0),
    'process_vm_readv': call(NR['process_vm_readv'], os.getpid(), 0, 0, 0, 0, 0),
    'sendmmsg': call(NR['sendmmsg'], pair[0].fileno(), 0, 0, 0),
    'recvmmsg': call(NR['recvmmsg'], pair[1].fileno(), 0, 0, 0x40, 0),
    'shutdown': attempt(lambda: pair[1].shutdown(socket.SHUT_WR)),
    'setsockopt': attempt(lambda: pair[1].setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)),
    'getsockopt': attempt(lambda: pair[1].getsockopt(socket.SOL_SOCKET, socket.SO_TYPE)),
}
for k, v in results.items():
    print('PROBE %s=%s' % (k, v))
`;
  /** A host process holding a datagram UNIX socket: what reached it, once stopped. */
  function hostDatagramSocket(path: string) {
    const child = spawn(
      'python3',
      [
        '-c',
        'import socket,sys,select\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ns.bind(sys.argv[1])\nprint("ready",flush=True)\nwhile True:\n  r,_,_=select.select([s,sys.stdin],[],[])\n  if s in r: print("GOT "+s.recv(100).decode(),flush=True)\n  if sys.stdin in r and not sys.stdin.readline(): break',
        path,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    return {
      ready: () => waitUntil(() => out.includes('ready'), 'the datagram socket', 5_000),
      received: async () => {
        child.stdin.end();
        await exited;
        return out
          .split('\n')
          .filter((l) => l.startsWith('GOT '))
          .map((l) => l.slice(4));
      },
    };
  }
  const probeResults = new Map<string, Record<string, unknown>>();

  it.each(KIND_CASES)('%s: the calls the seccomp filter rules on, confined and not', async (_label, kind) => {
    const { client } = await h.session(kind, 'ws');
    const { base, root } = layout(kind);
    const stream = join(base, 'stream.sock');
    const streamServer = createServer((socket) => socket.end());
    await new Promise<void>((resolve) => streamServer.listen(stream, resolve));
    const outcome: Record<string, unknown> = {};
    try {
      for (const [mode, sandbox] of [
        ['unconfined', null],
        ['workspace-write', workspaceWriteAt(root)],
      ] as const) {
        const dgram = join(base, `${mode}.sock`);
        const host = hostDatagramSocket(dgram);
        await host.ready();
        const result = await client.request(
          'process/start',
          startParams(`probe-${mode}`, ['python3', '-c', SYSCALL_PROBE, dgram, stream], root, sandbox),
        );
        expect(result.error).toBeUndefined();
        const collected = await collectUntilClosed(client, `probe-${mode}`);
        for (const line of collected.output.split('\n')) {
          const match = /^PROBE (.*)=(.*)$/.exec(line);
          if (match) outcome[`${mode}: ${match[1]}`] = match[2];
        }
        outcome[`${mode}: datagrams the host socket got`] = await host.received();
      }
    } finally {
      await new Promise((resolve) => streamServer.close(resolve));
    }
    probeResults.set(kind, outcome);
  });

  it('seccomp: what the filter refuses gets EPERM through either executor; what it leaves, the kernel answers', () => {
    const unconfined = {
      'socket AF_INET': 'ok',
      'socket AF_INET6': 'ok',
      'socket AF_NETLINK': 'ok',
      'socket AF_UNIX': 'ok',
      'socketpair AF_UNIX': 'ok',
      'send on a socketpair': 'ok',
      getsockname: 'ok',
      getpeername: 'ok',
      'bind AF_UNIX (abstract)': 'ok',
      'connect to a host UNIX socket': 'ok',
      'sendto a host UNIX socket': 'ok',
      'sendmsg to a host UNIX socket': 'ok',
      // EFAULT (the NULL params) where io_uring is enabled: the kernel got the call.
      io_uring_setup: expect.stringMatching(/^E/),
      'ptrace(PTRACE_TRACEME)': 'ok',
      process_vm_readv: 'ok',
      sendmmsg: 'ok',
      recvmmsg: 'ok',
      shutdown: 'ok',
      setsockopt: 'ok',
      getsockopt: 'ok',
      'datagrams the host socket got': ['sendto', 'sendmsg'],
    };
    const ours = {
      ...unconfined,
      'socket AF_INET': 'EPERM',
      'socket AF_INET6': 'EPERM',
      'socket AF_NETLINK': 'EPERM',
      getpeername: 'EPERM',
      'bind AF_UNIX (abstract)': 'EPERM',
      'connect to a host UNIX socket': 'EPERM',
      // Refused since the filter reads sendto's destination (before, the datagram reached the host's socket).
      'sendto a host UNIX socket': 'EPERM',
      sendmmsg: 'EPERM',
      io_uring_setup: 'EPERM',
      'ptrace(PTRACE_TRACEME)': 'EPERM',
      process_vm_readv: 'EPERM',
      // sendmsg's address is behind a pointer no seccomp filter can read: it still reaches a host datagram
      // socket, on Codex's too (SECURITY.md, "What is not covered").
      'datagrams the host socket got': ['sendmsg'],
    };
    // Codex refuses more calls on sockets already made (send, getsockname, shutdown, the socket options,
    // recvmmsg); ours leaves them to a socketpair's users (Node's libuv asks getsockname of its stdio).
    const codex = {
      ...ours,
      'send on a socketpair': 'EPERM',
      getsockname: 'EPERM',
      recvmmsg: 'EPERM',
      shutdown: 'EPERM',
      setsockopt: 'EPERM',
      getsockopt: 'EPERM',
    };
    const prefixed = (mode: string, table: Record<string, unknown>) =>
      Object.fromEntries(Object.entries(table).map(([key, value]) => [`${mode}: ${key}`, value]));
    expect(probeResults.get('tether')).toEqual({
      ...prefixed('unconfined', unconfined),
      ...prefixed('workspace-write', ours),
    });
    expect(probeResults.get('codex')).toEqual({
      ...prefixed('unconfined', unconfined),
      ...prefixed('workspace-write', codex),
    });
  });

  it('the tables agree', () => {
    const codex = tables.get('codex');
    const tether = tables.get('tether');
    expect(codex && tether, 'both tables were made').toBeTruthy();
    expect(Object.fromEntries(tether!)).toEqual(Object.fromEntries(codex!));
  });

  it('deny globs: ours denies what each pattern names; codex the same, or nothing where it fails open', () => {
    const ours = Object.fromEntries(GLOB_CASES.map(([pattern, denied]) => [pattern, [...denied].sort()]));
    const codex = Object.fromEntries(
      GLOB_CASES.map(([pattern, denied, failsOpen]) => [pattern, [...(failsOpen ?? denied)].sort()]),
    );
    expect(globResults.get('tether')).toEqual(ours);
    expect(globResults.get('codex')).toEqual(codex);
    // Fail closed: whatever codex denies, ours denies too.
    for (const [pattern, denied] of Object.entries(globResults.get('codex') as Record<string, string[]>)) {
      expect(ours[pattern], pattern).toEqual(expect.arrayContaining(denied));
    }
  });
});
