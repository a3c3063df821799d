/**
 * Detached processes through the whole product path, every part a real process: the harness bin →
 * registry bin → relay bin → our executor in remote mode (and the real codex exec-server, which has no
 * detached processes). `harness exec -d` starts a process that outlives every harness connection and the
 * session that started it; `ps` lists it; `attach` replays and follows it (in a real terminal with its PTY,
 * several at once, detach keys); `kill` signals it. Every error has its exit code.
 */
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot, type Stack, startStack, type Tmux } from '@tether/test-kit';
import { beforeAll, describe, expect, it } from 'vitest';
import { quote, useTerminals, useWork } from './stack-suite.ts';

const ENVIRONMENT = 'detach-e2e';
const LIMITED = 'detach-limit-e2e';
const CODEX = 'detach-codex-e2e';
/**
 * The executor's `[sessions] detached_ttl_sec`, short here (the default is 30 s): a session ends that long after
 * its connection did, and a detached process must outlive it.
 */
const DETACHED_TTL_SECONDS = 2;
const bin = join(repoRoot(), 'apps', 'harness', 'dist', 'main.js');
let stack: Stack;
// Every detached process runs with --cwd work: the executors' shutdown must end them all.
const work = useWork('tether-harness-detach-', () => stack);
const startTerminal = useTerminals();

function harnessEnv(environment: string, apiKey = stack.keys.harness): Record<string, string> {
  return {
    TETHER_HARNESS_REGISTRY: stack.registryUrl,
    TETHER_HARNESS_ENVIRONMENT_ID: environment,
    TETHER_HARNESS_API_KEY: apiKey,
  };
}

/** Runs the harness bin (with the stack's harness key unless `apiKey`); its output so far can be read while it runs. */
function harnessLive(args: string[], environment = ENVIRONMENT, apiKey?: string) {
  const child = spawn(process.execPath, [bin, ...args], {
    cwd: work,
    env: { ...process.env, ...harnessEnv(environment, apiKey) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d;
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d;
  });
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
  return { stdout: () => stdout, done };
}

/** Runs the harness bin to its end (stdin closed), from `work`. */
function harness(args: string[], environment = ENVIRONMENT, apiKey?: string) {
  return harnessLive(args, environment, apiKey).done;
}

/** `harness exec -d`: answers the printed id. */
async function startDetached(script: string, flags: string[] = [], environment = ENVIRONMENT): Promise<string> {
  const started = await harness(['exec', '-d', ...flags, '--cwd', work, '--', '/bin/sh', '-c', script], environment);
  expect(started.stderr).toBe('');
  expect(started.code).toBe(0);
  const id = started.stdout.trim();
  expect(id).toMatch(/^[0-9a-f]{8}$/);
  return id;
}

/** The harness bin in a fresh tmux window (startTmux shows its exit status when it ends). */
async function terminal(args: string[], size = { cols: 100, rows: 30 }): Promise<Tmux> {
  return startTerminal({
    command: [process.execPath, bin, ...args].map(quote).join(' '),
    cwd: work,
    ...size,
    env: harnessEnv(ENVIRONMENT),
  });
}

/** The harness's exit status in `tmux`. */
const exitOf = (tmux: Tmux): Promise<number> => tmux.waitForExit();

/** The `ps` line of `id` (as `apiKey`, default the stack's harness key, sees it), split into its columns. */
async function psLine(id: string, apiKey?: string): Promise<string[] | undefined> {
  const ps = await harness(['ps'], ENVIRONMENT, apiKey);
  expect(ps.code).toBe(0);
  return ps.stdout
    .split('\n')
    .find((line) => line.startsWith(`${id} `))
    ?.split(/\s{2,}/);
}

beforeAll(async () => {
  stack = await startStack();
  const config = join(work, 'executor.toml');
  writeFileSync(config, `[sessions]\ndetached_ttl_sec = ${DETACHED_TTL_SECONDS}\n`);
  await stack.startExecutor('tether', ENVIRONMENT, { args: ['--config', config] });
  await stack.startExecutor('tether', LIMITED, { args: ['--max-detached-processes', '1'] });
  await stack.startExecutor('codex', CODEX);
}, 120_000);

describe('harness exec -d, ps, attach', () => {
  it(`a detached process outlives its session (twice the ${DETACHED_TTL_SECONDS} s detach TTL with no harness connected); attach then shows its later output and exit code`, {
    timeout: 120_000,
  }, async () => {
    const flag = join(work, 'go-on');
    const id = await startDetached(
      `echo started; while [ ! -e ${quote(flag)} ]; do sleep 0.1; done; echo later; exit 9`,
    );
    // No harness is connected now; the session that started it ends DETACHED_TTL_SECONDS after its connection did.
    await new Promise((resolve) => setTimeout(resolve, 2 * DETACHED_TTL_SECONDS * 1000));
    const line = await psLine(id);
    expect(line?.slice(0, 2)).toEqual([id, 'running']);
    expect(Number(line?.[2])).toBeGreaterThan(0);
    expect(line?.[3]).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$/);
    expect(line?.[4]).toMatch(/^\/bin\/sh -c 'echo started; while/);

    const attach = harness(['attach', id]);
    // The replay comes first; the process then writes more only once it is told to.
    await new Promise((resolve) => setTimeout(resolve, 500));
    writeFileSync(flag, '');
    const attached = await attach;
    expect(attached.stderr).toBe('');
    expect(attached.stdout).toBe('started\nlater\n');
    expect(attached.code).toBe(9);
    expect((await psLine(id))?.slice(0, 2)).toEqual([id, 'exited(9)']);
    // Still retained after its end: attaching again replays it and answers the exit code.
    const again = await harness(['attach', id]);
    expect([again.stdout, again.code]).toEqual(['started\nlater\n', 9]);
  });

  it('several attachers at once each get the whole output', { timeout: 60_000 }, async () => {
    const flag = join(work, 'several');
    const id = await startDetached(
      `for i in 1 2 3; do echo "before $i"; done; while [ ! -e ${quote(flag)} ]; do sleep 0.1; done; seq 1 20000; exit 3`,
    );
    const attachers = [harness(['attach', id]), harness(['attach', id]), harness(['attach', id])];
    await new Promise((resolve) => setTimeout(resolve, 500));
    writeFileSync(flag, '');
    const expected = `before 1\nbefore 2\nbefore 3\n${Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join('')}`;
    for (const attached of await Promise.all(attachers)) {
      expect(attached.stderr).toBe('');
      expect(attached.stdout === expected).toBe(true);
      expect(attached.code).toBe(3);
    }
  });

  it('--no-replay follows only what comes next; a replay beyond retention says what was skipped', {
    timeout: 60_000,
  }, async () => {
    // 3 MiB of output with nobody reading (the executor keeps the last 1 MiB), then ticks until told to end.
    const flag = join(work, 'retention');
    const written = join(work, 'retention-written');
    const id = await startDetached(
      `head -c 3145728 /dev/zero | tr '\\0' x; echo; touch ${quote(written)}; while [ ! -e ${quote(flag)} ]; do echo tick; sleep 0.2; done; echo tail`,
    );
    // Attach only once the 3 MiB are out: --no-replay then follows the ticks alone (on a loaded machine the
    // attach could otherwise come in while the x's are still being written).
    await expect.poll(() => existsSync(written), { timeout: 20_000 }).toBe(true);
    const following = harnessLive(['attach', '--no-replay', id]);
    await expect.poll(() => following.stdout(), { timeout: 20_000 }).toContain('tick\n');
    writeFileSync(flag, '');
    const followed = await following.done;
    expect(followed.stderr).toBe('');
    expect(followed.stdout).toMatch(/^(tick\n)+tail\n$/);
    expect(followed.code).toBe(0);

    const replayed = await harness(['attach', id]);
    expect(replayed.code).toBe(0);
    expect(replayed.stderr).toBe(`harness: earlier output of ${id} is no longer retained by the executor\n`);
    expect(replayed.stdout).toMatch(/^x+\n(tick\n)+tail\n$/);
    expect(replayed.stdout.length).toBeLessThanOrEqual(1024 * 1024 + 64 * 1024);
    expect(replayed.stdout.length).toBeGreaterThan(512 * 1024);
  });
});

describe('harness attach at a terminal, with the process’s PTY', () => {
  it('follows the window, takes keys from two attachers, and the detach keys leave the process running', {
    timeout: 60_000,
  }, async () => {
    const id = await startDetached(
      'stty size | sed s/^/size=/; while read line; do echo "got=$line $(stty size)"; done; exit 4',
      ['-t'],
    );
    const first = await terminal(['attach', id], { cols: 100, rows: 30 });
    // Replayed: the size it started with (no terminal at exec -d: 24x80).
    await first.waitFor('size=24 80');
    await first.send(['one', 'Enter']);
    await first.waitFor('got=one 30 100');

    const second = await terminal(['attach', id], { cols: 90, rows: 25 });
    await second.waitFor('got=one 30 100');
    await second.send(['two', 'Enter']);
    await second.waitFor('got=two 25 90');
    await first.waitFor('got=two 25 90');

    await first.resize(120, 40);
    await first.send(['three', 'Enter']);
    await first.waitFor('got=three 40 120');
    await second.waitFor('got=three 40 120');

    await first.send(['C-p', 'C-q']);
    expect(await exitOf(first)).toBe(0);
    expect(await first.screen()).toContain(`harness: detached from ${id}; it keeps running`);
    expect((await psLine(id))?.slice(0, 2)).toEqual([id, 'running']);

    await second.send(['four', 'Enter']);
    await second.waitFor('got=four 40 120');
    await second.send('C-d');
    expect(await exitOf(second)).toBe(4);
  });

  it('--detach-keys chooses the sequence; the first key of it alone reaches the process', {
    timeout: 60_000,
  }, async () => {
    const id = await startDetached(
      'while read line; do echo "got=[$(printf %s "$line" | od -An -tx1 | tr -d " ")]"; done',
      ['-t'],
    );
    const tmux = await terminal(['attach', '--detach-keys', 'ctrl-],d', id]);
    await tmux.send(['a', 'C-]', 'b', 'Enter']);
    // a, Ctrl-] (0x1d: held, then sent when b showed it was not the sequence), b.
    await tmux.waitFor('got=[611d62]');
    await tmux.send(['C-]', 'd']);
    expect(await exitOf(tmux)).toBe(0);
    expect((await harness(['kill', '-s', 'KILL', id])).code).toBe(0);
  });

  it('watching by a view share: says so at once, sends nothing typed, and Ctrl-C names the token to come back', {
    timeout: 60_000,
  }, async () => {
    const id = await startDetached('while read line; do echo "got=$line"; done', ['-t']);
    const shared = await harness(['share', '--read-only', '--no-link', id]);
    expect(shared.code, shared.stderr).toBe(0);
    const token = shared.stdout.trim();
    try {
      const viewerKey = await stack.createKey('harness', ENVIRONMENT);
      const viewer = await startTerminal({
        command: [process.execPath, bin, 'attach', id].map(quote).join(' '),
        cwd: work,
        cols: 160,
        rows: 30,
        env: { ...harnessEnv(ENVIRONMENT, viewerKey), TETHER_HARNESS_SHARE_TOKEN: token },
      });
      await viewer.waitFor(`harness: watching ${id} read-only (all the share allows): nothing typed here reaches it`);
      await viewer.send(['from-viewer', 'Enter']);
      // The owner's line reaches the process and both screens; the viewer's, typed first, reached neither.
      const owner = await terminal(['attach', id]);
      await owner.send(['from-owner', 'Enter']);
      await owner.waitFor('got=from-owner');
      await viewer.waitFor('got=from-owner');
      expect(await owner.screen()).not.toContain('from-viewer');
      expect(await viewer.screen()).not.toContain('got=from-viewer');
      await viewer.send('C-c');
      expect(await exitOf(viewer)).toBe(130);
      expect(await viewer.screen()).toContain(
        `harness: detached from ${id}; it keeps running (harness attach --token TOKEN ${id} to come back)`,
      );
      // The owner is not watching: no such line at its terminal.
      expect(await owner.screen()).not.toContain('read-only');
      await owner.send(['C-p', 'C-q']);
      expect(await exitOf(owner)).toBe(0);
    } finally {
      // Revoked and ended, also after a failure: later tests' ps tables have no SHARES column.
      expect((await harness(['share', '--revoke', id])).code).toBe(0);
      expect((await harness(['kill', '-s', 'KILL', id])).code).toBe(0);
    }
  });
});

describe('harness kill', () => {
  it('signals a running process (default TERM; -s by name or number) and refuses ended or unknown ones', {
    timeout: 60_000,
  }, async () => {
    const id = await startDetached('trap "echo got-term; exit 5" TERM; echo ready; while :; do sleep 0.1; done');
    const killed = await harness(['kill', id]);
    expect([killed.code, killed.stderr]).toEqual([0, '']);
    const attached = await harness(['attach', id]);
    expect([attached.stdout, attached.code]).toEqual(['ready\ngot-term\n', 5]);

    const again = await harness(['kill', id]);
    expect([again.code, again.stderr]).toEqual([1, `harness: process ${id} has already exited (exit code 5)\n`]);

    const hard = await startDetached('trap "" TERM; echo ready; while :; do sleep 0.1; done');
    expect((await harness(['kill', '-s', '9', hard])).code).toBe(0);
    const ended = await harness(['attach', hard]);
    expect(ended.stdout).toBe('ready\n');
    expect(ended.code).toBe(137);
  });
});

describe('errors and their exit codes', () => {
  it('unknown ids exit 1 naming the id and the environment, and a bad signal 2', { timeout: 60_000 }, async () => {
    expect(await harness(['attach', 'nope'])).toEqual({
      code: 1,
      stdout: '',
      stderr: `harness: unknown process id nope in environment ${ENVIRONMENT}\n`,
    });
    expect(await harness(['kill', 'nope'])).toEqual({
      code: 1,
      stdout: '',
      stderr: `harness: unknown process id nope in environment ${ENVIRONMENT}\n`,
    });
    const badSignal = await harness(['kill', '-s', 'BOGUS', 'nope']);
    expect(badSignal.code).toBe(2);
    expect(badSignal.stderr).toContain('unknown signal "BOGUS"');
  });

  it('a start beyond --max-detached-processes exits 1 and says the limit', { timeout: 60_000 }, async () => {
    const id = await startDetached('sleep 60', [], LIMITED);
    const refused = await harness(['exec', '-d', '--cwd', work, '--', 'true'], LIMITED);
    expect(refused.code).toBe(1);
    expect(refused.stdout).toBe('');
    expect(refused.stderr).toContain('too many detached processes: the limit is 1');
    expect((await harness(['kill', '-s', 'KILL', id], LIMITED)).code).toBe(0);
  });

  it('an executor without the capability (codex exec-server) exits 1 for exec -d, ps, attach and kill', {
    timeout: 60_000,
  }, async () => {
    for (const args of [['exec', '-d', '--cwd', work, '--', 'sleep', '60'], ['ps'], ['attach', 'x'], ['kill', 'x']]) {
      const answer = await harness(args, CODEX);
      expect(answer.code, args.join(' ')).toBe(1);
      expect(answer.stdout).toBe('');
      expect(answer.stderr).toContain('this executor does not offer detached processes (capability processDetach');
    }
  });
});

describe('a detached process belongs to the API key that started it', () => {
  it('another harness key of the environment neither lists, attaches to nor kills it (an unknown id to it); its key and an admin key do', {
    timeout: 120_000,
  }, async () => {
    const other = await stack.createKey('harness', ENVIRONMENT);
    const admin = await stack.createKey('admin', ENVIRONMENT);
    // As in the finding: a command line that carries a secret.
    const started = await harness([
      'exec',
      '-d',
      '--cwd',
      work,
      '--',
      '/bin/sh',
      '-c',
      'trap "echo got-term; exit 5" TERM; echo ready; while :; do sleep 0.1; done',
      'owned',
      '--token=s3cr3t-owned',
    ]);
    expect([started.code, started.stderr]).toEqual([0, '']);
    const id = started.stdout.trim();
    expect(id).toMatch(/^[0-9a-f]{8}$/);
    // An id nobody has, for what the executor and the CLI answer about one.
    const nobodys = id === 'ffffffff' ? 'fffffffe' : 'ffffffff';

    // The other key: not listed, and attach, kill and kill -s KILL answer as for an id nobody has.
    const listed = await harness(['ps'], ENVIRONMENT, other);
    expect([listed.code, listed.stderr]).toEqual([0, '']);
    expect(listed.stdout).not.toContain(id);
    expect(listed.stdout).not.toContain('s3cr3t');
    for (const args of [['attach'], ['attach', '--no-replay'], ['kill'], ['kill', '-s', 'KILL']]) {
      const refused = await harness([...args, id], ENVIRONMENT, other);
      const unknown = await harness([...args, nobodys], ENVIRONMENT, other);
      expect(refused, args.join(' ')).toEqual({
        code: 1,
        stdout: '',
        stderr: `harness: unknown process id ${id} in environment ${ENVIRONMENT}\n`,
      });
      expect(refused.stderr.replace(id, nobodys)).toBe(unknown.stderr);
      expect(unknown.code).toBe(1);
    }

    // Its own key sees it, still running (nothing above reached it), with its command line.
    const own = await psLine(id);
    expect(own?.slice(0, 2)).toEqual([id, 'running']);
    expect(own?.[4]).toContain('--token=s3cr3t-owned');

    // An admin key lists it, and may stop it (as kubectl's cluster admin may any pod) and attach to it.
    expect((await psLine(id, admin))?.slice(0, 2)).toEqual([id, 'running']);
    const killed = await harness(['kill', id], ENVIRONMENT, admin);
    expect([killed.code, killed.stderr]).toEqual([0, '']);
    const followed = await harness(['attach', id], ENVIRONMENT, admin);
    expect([followed.stdout, followed.code]).toEqual(['ready\ngot-term\n', 5]);
    // Its owner attaches to it as well; the other key still does not.
    const replayed = await harness(['attach', id]);
    expect([replayed.stdout, replayed.code]).toEqual(['ready\ngot-term\n', 5]);
    expect((await harness(['attach', id], ENVIRONMENT, other)).code).toBe(1);
    expect((await psLine(id, other)) ?? null).toBeNull();
  });

  it('a key controls its own: the other key’s processes stay out of its ps, and its kill reaches its own', {
    timeout: 60_000,
  }, async () => {
    const other = await stack.createKey('harness', ENVIRONMENT);
    const mine = await startDetached('echo ready; while :; do sleep 0.1; done');
    const started = await harness(
      ['exec', '-d', '--cwd', work, '--', '/bin/sh', '-c', 'echo theirs; while :; do sleep 0.1; done'],
      ENVIRONMENT,
      other,
    );
    expect(started.code).toBe(0);
    const theirs = started.stdout.trim();
    expect((await psLine(theirs, other))?.slice(0, 2)).toEqual([theirs, 'running']);
    expect(await psLine(mine, other)).toBeUndefined();
    expect(await psLine(theirs)).toBeUndefined();
    expect((await harness(['kill', '-s', 'KILL', mine])).code).toBe(0);
    expect((await harness(['kill', '-s', 'KILL', theirs], ENVIRONMENT, other)).code).toBe(0);
    const ended = await harness(['attach', theirs], ENVIRONMENT, other);
    expect([ended.stdout, ended.code]).toEqual(['theirs\n', 137]);
  });
});
