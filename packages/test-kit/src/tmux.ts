/**
 * A real terminal for interactive tests: a private tmux server (its own socket file, so it never touches a
 * user's tmux) with one window running a command. Tests type into it, resize it and read its screen.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface TmuxOptions {
  /** The command line the window runs (through tmux's default shell, `sh -c`). */
  command: string;
  cols?: number;
  rows?: number;
  /** Variables for the command (added to the test process's). */
  env?: Record<string, string>;
  cwd?: string;
}

export interface Tmux extends AsyncDisposable {
  /** Types keys as tmux names them (`Enter`, `C-c`, `C-]`) or, with `literal`, the text as is. */
  send(keys: string | string[], options?: { literal?: boolean }): Promise<void>;
  /** The visible screen, trailing blank lines removed. */
  screen(): Promise<string>;
  /** Waits until the screen matches (default 15 s); throws with the screen when it does not. */
  waitFor(pattern: RegExp | string, timeoutMs?: number): Promise<string>;
  /** Resizes the window (the program in it gets SIGWINCH). */
  resize(cols: number, rows: number): Promise<void>;
  /** Whether the window's command is still running. */
  running(): Promise<boolean>;
  /** Waits until the command has ended (default 15 s) and answers its exit status. */
  waitForExit(timeoutMs?: number): Promise<number>;
  /** The command's exit status once it has ended (the window stays, showing it), else null. */
  exitStatus(): Promise<number | null>;
  /** Kills the tmux server and removes its socket directory. */
  close(): Promise<void>;
}

/** Whether tmux is installed (`.ci/run` installs Debian's package when it is missing). */
export function hasTmux(): boolean {
  try {
    execFileSync('tmux', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const STATUS_VARIABLE = 'tether_tmux_status';
const EXIT_MARK = '[tmux command exited';
/** The last line of the screen once the command has ended. */
const EXIT_LINE = /^\[tmux command exited (\d+)\]$/m;

export async function startTmux(options: TmuxOptions): Promise<Tmux> {
  const dir = mkdtempSync(join(tmpdir(), 'tether-tmux-'));
  const socket = join(dir, 'tmux.sock');
  const tmux = (args: string[]) => run('tmux', ['-S', socket, '-f', '/dev/null', ...args], { encoding: 'utf8' });
  const envArgs = Object.entries(options.env ?? {}).flatMap(([name, value]) => ['-e', `${name}=${value}`]);
  await tmux([
    'new-session',
    '-d',
    '-s',
    'test',
    '-x',
    String(options.cols ?? 100),
    '-y',
    String(options.rows ?? 30),
    ...(options.cwd ? ['-c', options.cwd] : []),
    ...envArgs,
    // The window outlives its command, which ends by printing its status: tmux 3.3a does not keep a dead
    // pane's screen (with remain-on-exit its last lines were lost, sometimes all of them), nor always its
    // status after a resize. The pane's shell (sh) runs this; `close` kills it with the server.
    `${options.command}\n${STATUS_VARIABLE}=$?; printf '\\n${EXIT_MARK} %s]\\n' "$${STATUS_VARIABLE}"; exec sleep 2147483647`,
  ]);
  // A manual window size is what `resize` sets, whatever clients attach.
  await tmux(['set-option', '-t', 'test', 'window-size', 'manual']);
  let closed = false;
  const screen = async () => (await tmux(['capture-pane', '-p', '-t', 'test'])).stdout.replace(/\s+$/, '');
  const self: Tmux = {
    async send(keys, sendOptions) {
      const list = Array.isArray(keys) ? keys : [keys];
      await tmux(['send-keys', '-t', 'test', ...(sendOptions?.literal ? ['-l'] : []), ...list]);
    },
    screen,
    async waitFor(pattern, timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      let text = '';
      for (;;) {
        text = await screen();
        if (typeof pattern === 'string' ? text.includes(pattern) : pattern.test(text)) return text;
        if (Date.now() > deadline) throw new Error(`tmux screen never matched ${String(pattern)}:\n${text}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async resize(cols, rows) {
      await tmux(['resize-window', '-t', 'test', '-x', String(cols), '-y', String(rows)]);
    },
    async running() {
      return (await self.exitStatus()) === null;
    },
    async waitForExit(timeoutMs = 15_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const status = await self.exitStatus();
        if (status !== null) return status;
        if (Date.now() > deadline) throw new Error(`tmux command still running:\n${await screen()}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async exitStatus() {
      const match = EXIT_LINE.exec(await screen());
      return match ? Number(match[1]) : null;
    },
    async close() {
      if (closed) return;
      closed = true;
      await tmux(['kill-server']).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
    [Symbol.asyncDispose]() {
      return self.close();
    },
  };
  return self;
}
