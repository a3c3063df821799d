// Sandboxing (`sandbox` on process/start and fs/*), differential: the same scenarios against Codex's
// exec-server (its codex-linux-sandbox helper on PATH, bubblewrap on the host) and ours, every profile Codex's
// agent sends and the others the schema has. Each scenario's outcome (exit code, sandboxDenied, the
// denial's words; an fs call's code and message) must be the same on both (CODEX-FINDINGS.md §21).

import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { b64, collectUntilClosed, fileUri, findProcesses, waitUntil } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  READ_ONLY,
  sandboxAt,
  useSandboxScratch,
  workspaceWrite,
  workspaceWriteAt,
  workspaceWriteDenying,
} from './sandbox-support.ts';
import { KIND_CASES, useHarness } from './support.ts';

const PROFILES: Record<string, unknown> = {
  'workspace-write': workspaceWrite('restricted'),
  // A deny glob (expanded at launch into the files it matches): the secret in the workspace is hidden.
  'workspace-write + deny glob': (root: string) => workspaceWriteDenying(`${root}/**/secret*`),
  'workspace-write + network': workspaceWrite('enabled'),
  'read-only': READ_ONLY,
  'managed, unrestricted filesystem': { type: 'managed', file_system: { type: 'unrestricted' }, network: 'restricted' },
  disabled: { type: 'disabled' },
  external: { type: 'external', network: 'restricted' },
};

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
  const { layout, startParams, run } = useSandboxScratch();

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
  });

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
      const before = new Set(readdirSync(root));
      const sandbox = {
        ...sandboxAt(root, typeof permissions === 'function' ? permissions(root) : permissions),
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
      // Mount points a sandbox made for protected names missing in a writable root are gone with it. Asked of this
      // case's own root: /tmp is every sandbox's on the machine (other files' run meanwhile, and a killed executor
      // cannot clean up), so what /tmp holds says nothing of this case.
      table.set(
        `${name}: protected mount points left in the root`,
        readdirSync(root).filter(
          (entry) => ['.git', '.agents', '.codex', '.aws'].includes(entry) && !before.has(entry),
        ),
      );
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

  it('the tables agree', () => {
    const codex = tables.get('codex');
    const tether = tables.get('tether');
    expect(codex && tether, 'both tables were made').toBeTruthy();
    expect(Object.fromEntries(tether!)).toEqual(Object.fromEntries(codex!));
  });
});
