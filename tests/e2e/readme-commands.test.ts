/**
 * The README's "First things to try", run as written against the stack `npm run quickstart` runs
 * (scripts/stack.mjs: registry, relay and an executor serving `local`, with its `data/env.sh`), on ports of
 * this test's choosing, from a directory laid out like a checkout: the section's shell block, then every
 * `harness …` command of its list, in a bash that has only what the block sets up. `ID` is the id that the
 * list's `harness exec -d` printed. `harness shell` needs a terminal: tests/e2e/harness-terminal runs it in
 * tmux.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { findProcesses, freePort, repoRoot, runToEnd, waitUntil } from '@tether/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const README_REGISTRY = 'http://127.0.0.1:8080';
const ENVIRONMENT = 'local';
const SECTION = '## First things to try';
const CONTENT = '# a file to copy\n';
const COPIED = '/tmp/README.md';

/** The section's first ```sh block and the `harness …` code spans of its text, in order. */
function firstThingsToTry(): { setup: string; commands: string[] } {
  const readme = readFileSync(join(repoRoot(), 'README.md'), 'utf8');
  const start = readme.indexOf(SECTION);
  expect(start, `README.md has a "${SECTION}" section`).toBeGreaterThanOrEqual(0);
  const next = readme.indexOf('\n## ', start + SECTION.length);
  const section = readme.slice(start, next < 0 ? undefined : next);
  const block = /```sh\n([\s\S]*?)```/.exec(section);
  expect(block, 'the section has a shell block').not.toBeNull();
  const text = section.replace(/```[\s\S]*?```/g, '');
  // Code spans may wrap across lines in the markdown source.
  const commands = [...text.matchAll(/`(harness [^`]+)`/g)].map((m) => (m[1] as string).replace(/\s*\n\s*/g, ' '));
  return { setup: (block?.[1] ?? '').replaceAll(README_REGISTRY, stackUrl()), commands };
}

let stack: ChildProcess | null = null;
let registryPort = 0;
const stackUrl = () => `http://127.0.0.1:${registryPort}`;
const work = mkdtempSync(join(tmpdir(), 'tether-readme-'));

/** Runs a bash script in `work` (where the stack keeps its data/, with a README.md to copy), stdin closed. */
function bash(script: string) {
  return runToEnd('bash', ['-c', `shopt -s expand_aliases\n${script}`], {
    cwd: work,
    env: {
      PATH: `${dirname(process.execPath)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: join(work, 'home'),
      LANG: 'C.UTF-8',
    },
  });
}

beforeAll(async () => {
  writeFileSync(join(work, 'README.md'), CONTENT);
  registryPort = await freePort();
  const relayPort = await freePort();
  const args = ['--data-dir', 'data', '--registry-port', String(registryPort), '--relay-port', String(relayPort)];
  stack = spawn(
    process.execPath,
    [join(repoRoot(), 'scripts', 'stack.mjs'), ...args, '--environment-id', ENVIRONMENT],
    {
      cwd: work,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  stack.stdout?.on('data', (d: Buffer) => {
    out += d;
  });
  stack.stderr?.on('data', (d: Buffer) => {
    out += d;
  });
  await waitUntil(() => out.includes('Ctrl-C stops everything.') || stack?.exitCode !== null, 'the stack', 60_000);
  expect(stack.exitCode, out).toBeNull();
}, 90_000);

afterAll(async () => {
  if (stack && stack.exitCode === null) {
    stack.kill('SIGTERM');
    await once(stack, 'exit');
  }
  expect(findProcesses({ cwdUnder: work })).toEqual([]);
  rmSync(work, { recursive: true, force: true });
  // The README copies its file to the executor's /tmp (this machine's): take back what this test put there.
  try {
    if (readFileSync(COPIED, 'utf8') === CONTENT) rmSync(COPIED);
  } catch {
    // not there
  }
});

describe('README: first things to try', () => {
  it('runs every harness command of the section, as written, with exit 0', { timeout: 120_000 }, async () => {
    const { setup, commands } = firstThingsToTry();
    // `harness shell` needs a terminal; `harness attach --token` is named, not run (it needs another key's token).
    const runnable = commands.filter(
      (command) => !command.startsWith('harness shell') && !command.startsWith('harness attach --token'),
    );
    expect(runnable.length, 'the section lists harness commands').toBeGreaterThanOrEqual(6);
    let id = '';
    for (const command of runnable) {
      const line = command.replace(/\bID\b/g, id);
      const run = await bash(`${setup}\n${line}`);
      // What a share says on stderr is part of its answer (the share's id and expiry, or how many were revoked).
      const said = command.startsWith('harness share --revoke')
        ? new RegExp(`^harness: 1 share of ${id} revoked\n$`)
        : command.startsWith('harness share')
          ? new RegExp(
              `^harness: share \\w+ of ${id} \\(control\\) until \\S+Z: .*the link opens the browser page once, until \\d\\d:\\d\\d\n$`,
            )
          : /^$/;
      expect({ command: line, code: run.code, stderr: run.stderr.replace(/^copied .*\n/m, '') }).toEqual({
        command: line,
        code: 0,
        stderr: expect.stringMatching(said),
      });
      if (command.startsWith('harness share ID')) {
        const [token, link] = run.stdout.split('\n');
        expect(token).toMatch(/^tsh_/);
        expect(link).toMatch(new RegExp(`/ui/#env=local&grant=tbgr_[\\w-]+&process=${id}&share=${token}$`));
      }
      if (command.startsWith('harness exec -d')) {
        id = run.stdout.trim();
        expect(id, 'exec -d prints the id').toMatch(/^[0-9a-z-]+$/);
      }
      if (command.startsWith('harness exec -- uname')) expect(run.stdout).toMatch(/^Linux /);
      if (command.startsWith('harness cat')) expect(run.stdout).toBe(CONTENT);
      if (command.startsWith('harness attach')) expect(run.stdout.trim().split('\n')).toHaveLength(5);
      if (command.startsWith('harness login --web')) expect(run.stdout).toMatch(/\/ui\/#env=local&grant=/);
    }
    expect(id, 'the section starts a detached process and attaches to it').not.toBe('');
    expect(runnable, 'the section shares it and revokes the share').toEqual(
      expect.arrayContaining(['harness share ID', 'harness share --revoke ID']),
    );
  });
});
