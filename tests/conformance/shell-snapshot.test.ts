// Shell snapshots (capability `shellSnapshotV2`), the same requests against codex's exec-server and ours over
// every transport, the rendezvous included (CODEX-FINDINGS.md §22): a `[shell.path, "-lc", script]` start of a
// scope restores the login profile's functions, options, aliases and variables, captured once per scope.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { collectUntilClosed, type TestClient } from '@tether/test-kit';
import { describe, expect, it } from 'vitest';
import { useSandboxScratch, workspaceWriteAt } from './sandbox-support.ts';
import { CASES_WITH_REMOTE, KIND_CASES, useHarness } from './support.ts';

const BASH = { name: 'bash', path: '/bin/bash' };

describe.each(CASES_WITH_REMOTE)('shell snapshots: %s', (_label, { kind, transport }) => {
  const h = useHarness();

  /** A home whose login profile counts its runs in `runs` and leaves a variable, a function, an alias, an option. */
  function home(profile?: string): { home: string; runs: string } {
    const dir = mkdtempSync(join(h.workDir, 'home-'));
    const runs = join(dir, 'runs');
    writeFileSync(
      join(dir, '.bash_profile'),
      profile ??
        [
          `echo profile >> '${runs}'`,
          'echo noise from the profile',
          'export FROM_PROFILE=1 GIVEN=from-profile',
          'greet() { echo "hello from a profile function"; }',
          "alias ll='ls -l'",
          'set -o noclobber',
          'cd /',
        ].join('\n'),
    );
    writeFileSync(join(dir, '.bashrc'), `echo rc >> '${runs}'\nrcfn() { echo "from bashrc"; }\n`);
    return { home: dir, runs };
  }

  const runsOf = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean);

  async function run(client: TestClient, processId: string, argv: string[], env: Record<string, string>, extra = {}) {
    await client.call(
      'process/start',
      h.startParams(processId, argv, { env: { PATH: '/usr/bin:/bin', ...env }, ...extra }),
    );
    return collectUntilClosed(client, processId);
  }

  it('advertises shellSnapshotV2', async () => {
    const { initializeResult } = await h.session(kind, transport);
    const info = initializeResult.environmentInfo as { capabilities: Record<string, boolean> };
    expect(info.capabilities.shellSnapshotV2).toBe(true);
  });

  it('restores the profile once per scope: variables, functions (~/.bashrc too), aliases, options; the start’s variables, cwd and arguments win', async () => {
    const { client } = await h.session(kind, transport);
    const { home: dir, runs } = home();
    const script = [
      'echo "FROM_PROFILE=$FROM_PROFILE GIVEN=$GIVEN"',
      'greet',
      'rcfn',
      'alias',
      'shopt -qo noclobber && echo noclobber',
      'shopt -q login_shell || echo "not a login shell"',
      'pwd',
      'echo "$0 $1"',
      'env | grep -c SNAPSHOT',
    ].join('; ');
    const snapshot = { scopeId: 'scope-1', shell: BASH };
    const first = await run(
      client,
      'first',
      ['/bin/bash', '-lc', script, 'zero', 'one'],
      { HOME: dir, GIVEN: 'by-start' },
      {
        shellSnapshot: snapshot,
      },
    );
    expect(first.stdout).toBe(
      [
        'FROM_PROFILE=1 GIVEN=by-start',
        'hello from a profile function',
        'from bashrc',
        "alias ll='ls -l'",
        'noclobber',
        'not a login shell',
        h.workDir,
        'zero one',
        '0',
        '',
      ].join('\n'),
    );
    // The profile ran once (the capture), and not per command: the second start restores the same snapshot.
    expect(runsOf(runs)).toEqual(['profile', 'rc']);
    const second = await run(
      client,
      'second',
      ['/bin/bash', '-lc', 'echo "GIVEN=$GIVEN"; greet'],
      { HOME: dir },
      {
        shellSnapshot: snapshot,
      },
    );
    expect(second).toMatchObject({ stdout: 'GIVEN=from-profile\nhello from a profile function\n', exitCode: 0 });
    expect(runsOf(runs)).toEqual(['profile', 'rc']);
    // Another cwd is captured again.
    const elsewhere = join(h.workDir, 'elsewhere');
    mkdirSync(elsewhere, { recursive: true });
    await run(
      client,
      'third',
      ['/bin/bash', '-lc', 'greet'],
      { HOME: dir },
      {
        shellSnapshot: snapshot,
        cwd: `file://${elsewhere}`,
      },
    );
    expect(runsOf(runs)).toEqual(['profile', 'rc', 'profile', 'rc']);
  });

  it('runs any other argv as given: `bash -lc` by name, `-l -c`, `-c`', async () => {
    const { client } = await h.session(kind, transport);
    const { home: dir, runs } = home();
    const snapshot = { shellSnapshot: { scopeId: 'scope-2', shell: BASH } };
    const byName = await run(client, 'by-name', ['bash', '-lc', 'echo "[$FROM_PROFILE]"'], { HOME: dir }, snapshot);
    // A login shell run as given reads its profile itself (its noise included), not ~/.bashrc.
    expect(byName.stdout).toBe('noise from the profile\n[1]\n');
    const split = await run(
      client,
      'split',
      ['/bin/bash', '-l', '-c', 'echo "[$FROM_PROFILE]"'],
      { HOME: dir },
      snapshot,
    );
    expect(split.stdout).toBe('noise from the profile\n[1]\n');
    const plain = await run(client, 'plain', ['/bin/bash', '-c', 'echo "[$FROM_PROFILE]"'], { HOME: dir }, snapshot);
    expect(plain.stdout).toBe('[]\n');
    expect(runsOf(runs)).toEqual(['profile', 'profile']);
  });

  it('a profile that fails leaves the command as given', async () => {
    const { client } = await h.session(kind, transport);
    const { home: dir } = home('echo broken profile\nexit 3\n');
    const result = await run(
      client,
      'broken',
      ['/bin/bash', '-lc', 'echo unreached'],
      { HOME: dir },
      {
        shellSnapshot: { scopeId: 'scope-3', shell: BASH },
      },
    );
    expect(result).toMatchObject({ stdout: 'broken profile\n', exitCode: 3 });
  });

  it('POSIX sh: the variables of ~/.profile, captured once (not its aliases)', async () => {
    const { client } = await h.session(kind, transport);
    const dir = mkdtempSync(join(h.workDir, 'home-'));
    const runs = join(dir, 'runs');
    writeFileSync(join(dir, '.profile'), `echo profile >> '${runs}'\nexport FROM_PROFILE=sh\nalias hi='echo hi'\n`);
    const snapshot = { shellSnapshot: { scopeId: 'scope-4', shell: { name: 'sh', path: '/bin/sh' } } };
    const script = 'echo "[$FROM_PROFILE]"; alias hi 2>/dev/null || echo "no alias"';
    const first = await run(client, 'sh-1', ['/bin/sh', '-lc', script], { HOME: dir }, snapshot);
    expect(first).toMatchObject({ stdout: '[sh]\nno alias\n', exitCode: 0 });
    await run(client, 'sh-2', ['/bin/sh', '-lc', 'echo again'], { HOME: dir }, snapshot);
    expect(runsOf(runs)).toEqual(['profile']);
  });

  it('refuses a snapshot without its scope or shell (-32602)', async () => {
    const { client } = await h.session(kind, transport);
    for (const shellSnapshot of [{ shell: BASH }, { scopeId: 'x' }, { scopeId: 'x', shell: 'bash' }]) {
      const answer = await client.request(
        'process/start',
        h.startParams('bad', ['/bin/bash', '-lc', 'true'], { shellSnapshot }),
      );
      expect(answer.error?.code).toBe(-32602);
    }
  });
});

describe.each(KIND_CASES)('shell snapshots in a sandbox: %s', (kind) => {
  const h = useHarness();
  const scratch = useSandboxScratch();

  it('a sandboxed start’s profile is captured inside the sandbox: its state arrives, its writes outside do not', async () => {
    const { client } = await h.session(kind, 'ws');
    const { root, outside } = scratch.layout(kind);
    const home = join(outside, 'home');
    mkdirSync(home);
    const runs = join(home, 'runs');
    writeFileSync(
      join(home, '.bash_profile'),
      [
        `{ echo profile >> '${runs}'; } 2>/dev/null`,
        `touch '${outside}/written-by-profile' 2>/dev/null`,
        'export FROM_PROFILE=1',
        'greet() { echo "hello from a profile function"; }',
      ].join('\n'),
    );
    writeFileSync(join(home, '.bashrc'), 'rcfn() { echo "from bashrc"; }\n');
    const script = 'echo "[$FROM_PROFILE]"; greet; rcfn';
    const params = scratch.startParams('boxed', ['/bin/bash', '-lc', script], root, workspaceWriteAt(root), {
      HOME: home,
    });
    await client.call('process/start', { ...params, shellSnapshot: { scopeId: 'boxed', shell: BASH } });
    const collected = await collectUntilClosed(client, 'boxed');
    expect(collected).toMatchObject({ stdout: '[1]\nhello from a profile function\nfrom bashrc\n', exitCode: 0 });
    // The profile ran (its state arrived) but could not write outside the workspace, nor count its run.
    expect(existsSync(join(outside, 'written-by-profile'))).toBe(false);
    expect(existsSync(runs)).toBe(false);
  });
});
