import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MAX_SNAPSHOT_BYTES, parseCapture, ShellSnapshots, type SnapshotStart } from './shell-snapshot.js';

const BASH = { name: 'bash', path: '/bin/bash' };
const dirs: string[] = [];
const owned: ShellSnapshots[] = [];

afterEach(() => {
  for (const snapshots of owned.splice(0)) snapshots.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function snapshots(options: ConstructorParameters<typeof ShellSnapshots>[0] = {}): ShellSnapshots {
  const made = new ShellSnapshots(options);
  owned.push(made);
  return made;
}

/** A home whose ~/.bash_profile is `profile`, and a login-shell start of `script` in it. */
function homeWith(profile: string, script = 'true'): { start: SnapshotStart; runs: string } {
  const home = mkdtempSync(join(tmpdir(), 'tether-snapshot-'));
  dirs.push(home);
  const runs = join(home, 'runs');
  writeFileSync(join(home, '.bash_profile'), `echo run >> '${runs}'\n${profile}`);
  return { start: { argv: ['/bin/bash', '-lc', script], cwd: home, env: { HOME: home, PATH: '/usr/bin:/bin' } }, runs };
}

/** Runs a start as the executor would (its argv, cwd, env) and returns its stdout. */
function runStart(start: SnapshotStart): string {
  const [file, ...args] = start.argv;
  return spawnSync(file!, args, { cwd: start.cwd, env: start.env, encoding: 'utf8' }).stdout;
}

/** Whether a process has ended (gone, or a zombie waiting for its reaper: SIGKILL has taken it). */
function ended(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8')
      .replace(/^.*\) /, '')
      .startsWith('Z');
  } catch {
    return true;
  }
}

/** Waits (boundedly) for a killed process to end; whether it did. */
async function endsSoon(pid: number): Promise<boolean> {
  for (let i = 0; i < 250 && !ended(pid); i++) await new Promise((resolve) => setTimeout(resolve, 20));
  return ended(pid);
}

const runCount = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean).length;

describe('ShellSnapshots', () => {
  it('captures once per owner, scope, shell and cwd; another owner gets its own capture, never the first one', async () => {
    const set = snapshots();
    const { start, runs } = homeWith('export SECRET_OF_A=1\n', 'echo "[$SECRET_OF_A]"');
    const scope = { scopeId: 's', shell: BASH };
    const first = await set.apply('key:a', scope, start);
    expect(first.argv.slice(0, 2)).toEqual(['/bin/bash', '-pc']);
    expect(runStart(first)).toBe('[1]\n');
    await set.apply('key:a', scope, start);
    expect(runCount(runs)).toBe(1);
    // The same scope name from another principal: a capture of its own.
    const other = await set.apply('key:b', scope, start);
    expect(runStart(other)).toBe('[1]\n');
    expect(runCount(runs)).toBe(2);
    await set.apply('key:a', { scopeId: 't', shell: BASH }, start);
    expect(runCount(runs)).toBe(3);
    expect(set.size).toBe(3);
  });

  it('concurrent starts of a scope share one capture', async () => {
    const set = snapshots();
    const { start, runs } = homeWith('sleep 0.2\n');
    const scope = { scopeId: 's', shell: BASH };
    await Promise.all([set.apply('o', scope, start), set.apply('o', scope, start), set.apply('o', scope, start)]);
    expect(runCount(runs)).toBe(1);
  });

  it('a capture past its time is killed with what its profile started, and the start runs as given', async () => {
    const set = snapshots({ timeoutMs: 300 });
    const { start, runs } = homeWith('sleep 30 &\necho "$!" > "$HOME/background"\nsleep 30\n');
    const applied = await set.apply('o', { scopeId: 's', shell: BASH }, start);
    expect(applied).toBe(start);
    const background = Number(readFileSync(join(start.cwd, 'background'), 'utf8'));
    expect(await endsSoon(background)).toBe(true);
    // The failure is remembered for the scope: the next start does not capture (and wait) again.
    expect(await set.apply('o', { scopeId: 's', shell: BASH }, start)).toBe(start);
    expect(runCount(runs)).toBe(1);
  });

  it('close() kills a capture in flight; the start then runs as given', async () => {
    const set = snapshots();
    const { start } = homeWith('echo "$$" > "$HOME/pid"\nsleep 30\n');
    const applying = set.apply('o', { scopeId: 's', shell: BASH }, start);
    const pidFile = join(start.cwd, 'pid');
    for (let i = 0; i < 200; i++) {
      try {
        if (readFileSync(pidFile, 'utf8').trim() !== '') break;
      } catch {
        // not yet
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    set.close();
    expect(await applying).toBe(start);
    expect(await endsSoon(Number(readFileSync(pidFile, 'utf8')))).toBe(true);
    expect(set.size).toBe(0);
  });

  it('a capture that prints more than 1 MiB is given up: the start runs as given', async () => {
    const set = snapshots();
    const { start, runs } = homeWith("head -c 2000000 /dev/zero | tr '\\0' x\nexport LOUD=1\n", 'echo "[$LOUD]"');
    const applied = await set.apply('o', { scopeId: 's', shell: BASH }, start);
    expect(applied).toBe(start);
    expect(runCount(runs)).toBe(1);
  });

  it('keeps at most maxSnapshots, the least recently used going first', async () => {
    const set = snapshots({ maxSnapshots: 2 });
    const { start, runs } = homeWith('');
    const scope = (scopeId: string) => ({ scopeId, shell: BASH });
    await set.apply('o', scope('a'), start);
    await set.apply('o', scope('b'), start);
    await set.apply('o', scope('a'), start); // a is now the most recent
    await set.apply('o', scope('c'), start); // b goes
    expect(set.size).toBe(2);
    expect(runCount(runs)).toBe(3);
    await set.apply('o', scope('a'), start);
    expect(runCount(runs)).toBe(3);
    await set.apply('o', scope('b'), start);
    expect(runCount(runs)).toBe(4);
  });

  it('leaves a start as given where no snapshot applies: another shell, another argv shape', async () => {
    const set = snapshots();
    const { start } = homeWith('');
    const fish = { scopeId: 's', shell: { name: 'fish', path: '/usr/bin/fish' } };
    expect(await set.apply('o', fish, { ...start, argv: ['/usr/bin/fish', '-lc', 'true'] })).toEqual({
      ...start,
      argv: ['/usr/bin/fish', '-lc', 'true'],
    });
    for (const argv of [
      ['bash', '-lc', 'true'],
      ['/bin/bash', '-c', 'true'],
      ['/bin/bash', '-lc'],
    ]) {
      const given = { ...start, argv };
      expect(await set.apply('o', { scopeId: 's', shell: BASH }, given)).toBe(given);
    }
    expect(set.size).toBe(0);
  });
});

describe('parseCapture', () => {
  const capture = (script: string, env: string) => `noise\0tether-shell-snapshot\0${script}\0tether-shell-env\0${env}`;

  it('takes the state between the marks and the environment after, less the capturing shell’s own', () => {
    expect(parseCapture('bash', capture('f () { :; }\n', 'A=1\0PWD=/x\0OLDPWD=/y\0B=two=2\0junk\0'))).toEqual({
      dialect: 'bash',
      script: 'f () { :; }\n',
      env: { A: '1', B: 'two=2' },
    });
  });

  it('gives up on missing marks and on a snapshot too large for one environment variable', () => {
    expect(parseCapture('bash', 'exit before the marks')).toBeNull();
    expect(parseCapture('bash', capture('x'.repeat(MAX_SNAPSHOT_BYTES), ''))).toBeNull();
  });
});
