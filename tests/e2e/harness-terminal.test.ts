import { join } from 'node:path';
import { findProcesses, repoRoot, type Stack, startStack, type Tmux } from '@tether/test-kit';
import { beforeAll, describe, expect, it } from 'vitest';
import { quote, useTerminals, useWork } from './stack-suite.ts';

const ENVIRONMENT = 'terminal-e2e';
const bin = join(repoRoot(), 'apps', 'harness', 'dist', 'main.js');
let stack: Stack;
const work = useWork('tether-harness-terminal-', () => stack);
const startTerminal = useTerminals();

/** The harness bin with `args`, in a fresh tmux window of cols x rows, run from `work`. */
async function terminal(args: string[], size = { cols: 100, rows: 30 }, after = ''): Promise<Tmux> {
  return startTerminal({
    // startTmux shows the command's exit status; `after` runs once the harness has ended and keeps its
    // status (`(exit N)`). The shell ignores Ctrl-C's SIGINT (so that it lives to report); the harness
    // installs its own handler. The tests look for output the remote side repeats or prints on a key,
    // never for one early line.
    command: `trap "" INT; ${[process.execPath, bin, ...args].map(quote).join(' ')}; tether_harness_status=$?${after}; (exit $tether_harness_status)`,
    cwd: work,
    ...size,
    env: {
      TETHER_HARNESS_REGISTRY: stack.registryUrl,
      TETHER_HARNESS_ENVIRONMENT_ID: ENVIRONMENT,
      TETHER_HARNESS_API_KEY: stack.keys.harness,
      TETHER_CONFIG: join(work, 'no-config.toml'),
    },
  });
}

/** `harness exec` (with `flags`, e.g. `-t`) of `/bin/sh -c script` in `work`, at a fresh terminal. */
const execAtTerminal = (flags: string[], script: string) =>
  terminal(['exec', ...flags, '--cwd', work, '--', '/bin/sh', '-c', script]);

/**
 * The harness's exit status, once startTmux shows it. A timeout says which processes were still running in
 * `work` (the harness, the remote command), so that it shows where things stopped.
 */
async function exitCode(tmux: Tmux): Promise<number> {
  try {
    return await tmux.waitForExit(25_000);
  } catch (err) {
    const running = findProcesses({ cwdUnder: work }).map((info) => `${info.pid} ${info.cmdline}`);
    throw new Error(`${(err as Error).message}\nstill running in ${work}:\n${running.join('\n') || '(none)'}`);
  }
}

/** Presses Enter until the screen matches (the remote side answers each line it reads). */
async function untilAnswer(tmux: Tmux, pattern: RegExp): Promise<string> {
  for (let attempt = 0; ; attempt++) {
    await tmux.send('Enter');
    try {
      return await tmux.waitFor(pattern, 1000);
    } catch (err) {
      if (attempt === 10) throw err;
    }
  }
}

/**
 * Presses Enter until the remote side prints `size=ROWS COLS`: the window's SIGWINCH reaches the harness
 * asynchronously, so a key typed right after the resize may be read remotely before the new size is set.
 */
async function untilSize(tmux: Tmux, rows: number, cols: number): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    await tmux.send('Enter');
    try {
      await tmux.waitFor(`size=${rows} ${cols}`, 1000);
      return;
    } catch (err) {
      if (attempt === 10) throw err;
    }
  }
}

beforeAll(async () => {
  stack = await startStack();
  await stack.startExecutor('tether', ENVIRONMENT, { env: { SHELL: '/bin/bash' } });
}, 120_000);

describe('harness exec -t at a terminal', { timeout: 60_000 }, () => {
  it('the remote terminal follows the window: stty size changes after tmux resizes it', async () => {
    const tmux = await execAtTerminal(
      ['-t'],
      'stty size | sed s/^/size=/; while read line; do stty size | sed s/^/size=/; done',
    );
    await tmux.waitFor('size=30 100');
    await tmux.resize(132, 41);
    await untilSize(tmux, 41, 132);
    await tmux.resize(60, 20);
    await untilSize(tmux, 20, 60);
    await tmux.send('C-d');
    expect(await exitCode(tmux)).toBe(0);
  });

  it("sends the terminal's TERM, as ssh does (tmux's, not the executor's default xterm)", async () => {
    const tmux = await terminal(
      // The remote side answers the first line it reads and exits by itself (Ctrl-D is the resize test's).
      ['exec', '-t', '--cwd', work, '--', '/bin/sh', '-c', 'read line; echo "remote=[$TERM]"'],
      undefined,
      '; echo "local=[$TERM]"',
    );
    await untilAnswer(tmux, /remote=\[.*\]/);
    expect(await exitCode(tmux)).toBe(0);
    const screen = await tmux.waitFor(/local=\[.*\]/);
    const local = /local=\[(.*)\]/.exec(screen)?.[1];
    const remote = /remote=\[(.*)\]/.exec(screen)?.[1];
    expect(local).toMatch(/^(screen|tmux)/);
    expect(remote).toBe(local);
  });

  it('Ctrl-C reaches the remote process through its terminal', async () => {
    const tmux = await execAtTerminal(
      ['-t'],
      'trap "echo interrupted; exit 7" INT; while :; do echo ready; sleep 0.2; done',
    );
    await tmux.waitFor('ready');
    await tmux.send('C-c');
    await tmux.waitFor('interrupted');
    expect(await exitCode(tmux)).toBe(7);
  });

  it("the remote command's exit code is the harness's", async () => {
    const tmux = await execAtTerminal(['-t'], 'exit 42');
    expect(await exitCode(tmux)).toBe(42);
  });

  it('a missing program exits 127 (its message: harness-errors.test.ts)', async () => {
    const tmux = await terminal(['exec', '-t', '--cwd', work, '--', '/no/such/prog']);
    expect(await exitCode(tmux)).toBe(127);
  });
});

describe('harness exec without -t at a terminal', { timeout: 60_000 }, () => {
  it('Ctrl-C interrupts the remote process and the harness exits 130, as ssh does', async () => {
    const tmux = await execAtTerminal([], 'while :; do echo ready; sleep 0.2; done');
    await tmux.waitFor('ready');
    await tmux.send('C-c');
    expect(await exitCode(tmux)).toBe(130);
  });
});

describe('harness shell', { timeout: 60_000 }, () => {
  it('is the remote login shell ($SHELL -l) in a terminal that follows the window, with our TERM', async () => {
    const tmux = await terminal(['shell', ENVIRONMENT, '--cwd', work], { cols: 90, rows: 25 });
    await tmux.send(['shopt -q login_shell && echo "login=yes $(stty size) [$TERM]"', 'Enter']);
    await tmux.waitFor(/login=yes 25 90 \[(screen|tmux)/);
    await tmux.resize(110, 35);
    // The resize travels harness → relay → executor while the next line is typed, as over ssh: a line typed
    // at once may still see the old size, so ask until the new one is there.
    for (let attempt = 1; ; attempt++) {
      await tmux.send(['echo "now $(stty size)"', 'Enter']);
      const seen = await tmux.waitFor('now 35 110', 2_000).then(
        () => true,
        () => false,
      );
      if (seen) break;
      if (attempt === 8) await tmux.waitFor('now 35 110', 1);
    }
    await tmux.send(['exit 5', 'Enter']);
    expect(await exitCode(tmux)).toBe(5);
  });
});
