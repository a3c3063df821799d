import { type Environment, type ProcessInfo, type SignalName, TetherError } from '@tether/client';
import { type Command, InvalidArgumentError } from 'commander';
import {
  type CliIo,
  connectOptions,
  flushOutput,
  OutputClosedError,
  printable,
  printOutput,
  type SetExit,
  withEnvironment,
  writeOutput,
} from '../common.js';
import { type ConnectFlags, targetName } from '../target.js';
import { forwardInput } from './stdin.js';
import { followWindowSize } from './window-size.js';

/** `ps`, `attach` and `kill`: the executor's detached processes (`harness exec -d`). */
export function registerProcesses(program: Command, io: CliIo, setExit: SetExit): void {
  connectOptions(
    program
      .command('ps')
      .description("list the environment's detached processes (harness exec -d) this API key started")
      .argument('[environment]', 'environment id (default: --environment-id or its variable)'),
  )
    .addHelpText(
      'after',
      `
Columns: ID (for attach and kill), STATE (starting, running, exited(CODE)), PID (on the executor's host),
STARTED (UTC), COMMAND. Control characters in a command are shown as ?.
A detached process belongs to the API key that started it: other keys of the environment neither see nor
attach to nor signal it (to them its id is unknown); an admin key sees and controls every one. Through
--url (an executor's own listener) every process is listed.
Exit status: 0; 1 when the executor does not offer detached processes (e.g. codex exec-server); 255 when
the environment could not be reached.`,
    )
    .action(async (environment: string | undefined, options: ConnectFlags) => {
      setExit(
        await withEnvironment(io, options, environment, async (env) => {
          await writeOutput(io, io.stdout, formatProcessTable(await env.listProcesses()));
          await flushOutput(io);
          return 0;
        }),
      );
    });

  connectOptions(
    program
      .command('attach')
      .description('follow a detached process: replay its retained output, then stream it to its end')
      .argument('<id>', 'process id (as harness exec -d printed it, or harness ps lists it)')
      .option('-i, --interactive', 'forward stdin to a process without a terminal (started with exec -d -i)', false)
      .option('--no-replay', 'skip the output retained so far; follow only what comes next')
      .option(
        '--token <token>',
        'a token from the owner\u2019s harness share: follow a process another API key started (or $TETHER_HARNESS_SHARE_TOKEN)',
      )
      .option('-r, --read-only', 'only watch: nothing typed here reaches the process', false)
      .option(
        '--detach-keys <keys>',
        `keys that detach a terminal from the process, leaving it running (default ${DEFAULT_DETACH_KEYS})`,
        parseDetachKeys,
      ),
  )
    .addHelpText(
      'after',
      `
A process in a terminal gets this terminal when stdin is one: raw keys go to it, the size follows the
window, and the detach keys (default ${DEFAULT_DETACH_KEYS}, as docker; e.g. --detach-keys 'ctrl-\\' or
--detach-keys '~,.') leave it running. Otherwise Ctrl-C detaches. Several harnesses may attach at once;
each sees the whole output, and keys from each reach the process.
Output the executor no longer retains (it keeps the last 1 MiB of each process by default) is skipped
with a note on stderr.
Exit status: the process's exit code once it ends; 0 after the detach keys; 130 after Ctrl-C; 141 when our
output's reader went away (| head): detached quietly, the process goes on; 1 for an unknown id (another
API key's process is one) or an executor without detached processes (e.g. codex exec-server); 255 when
the environment could not be reached or the connection was lost.`,
    )
    .action(async (id: string, options: ConnectFlags & AttachFlags) => {
      setExit(
        await withEnvironment(io, options, undefined, (env) =>
          naming(id, options, io, () => attachCommand(env, id, options, io)),
        ),
      );
    });

  connectOptions(
    program
      .command('kill')
      .description('send a signal to a detached process (default TERM)')
      .argument('<id>', 'process id')
      .option('-s, --signal <signal>', `one of ${SIGNAL_NAMES_HELP} (default TERM)`, parseSignal),
  )
    .addHelpText(
      'after',
      `
The signal goes to the process's whole process group. Exit status: 0; 1 for an unknown id (another API
key's process is one), a process that has already exited, or an executor without detached processes; 2
for an unknown signal; 255 when the environment could not be reached.`,
    )
    .action(async (id: string, options: ConnectFlags & { signal?: SignalName }) => {
      setExit(
        await withEnvironment(io, options, undefined, (env) =>
          naming(id, options, io, async () => {
            await env.kill(id, options.signal ?? 'terminate');
            return 0;
          }),
        ),
      );
    });
}

/**
 * Runs `action`, naming where an unknown id was looked for: `unknown process id ID in environment ENV`. A detached
 * process of another API key is answered exactly so (the executor shows it to its owner and admin keys only), so
 * this says nothing of whether it exists.
 */
async function naming(id: string, flags: ConnectFlags, io: CliIo, action: () => Promise<number>): Promise<number> {
  try {
    return await action();
  } catch (err) {
    if (!(err instanceof TetherError) || err.message !== `unknown process id ${id}`) throw err;
    let where: string;
    try {
      where = targetName(flags, io.env);
    } catch {
      throw err;
    }
    throw new TetherError(err.code, `unknown process id ${id} in ${where}`, {
      cause: err,
      ...(err.rpcCode === undefined ? {} : { rpcCode: err.rpcCode }),
    });
  }
}

// exec -d ------------------------------------------------------------------------------------------

export interface DetachedStartFlags {
  tty: boolean;
  interactive: boolean;
  cwd?: string;
  env: Record<string, string>;
  cleanEnv: boolean;
}

/** `exec -d`: starts the process detached and prints its id; it runs on without this harness. */
export async function startDetached(env: Environment, argv: string[], options: DetachedStartFlags, io: CliIo) {
  const { processId } = await env.spawnDetached(argv, {
    ...(options.cwd ? { cwd: options.cwd } : {}),
    env: options.tty && io.env.TERM ? { TERM: io.env.TERM, ...options.env } : options.env,
    inheritEnv: !options.cleanEnv,
    tty: options.tty,
    // -i: stdin stays open, for `harness attach -i` to write to.
    stdin: options.interactive,
    ...(options.tty && io.stdout.rows && io.stdout.columns
      ? { size: { rows: io.stdout.rows, cols: io.stdout.columns } }
      : {}),
  });
  await writeOutput(io, io.stdout, `${processId}\n`);
  return 0;
}

// ps -----------------------------------------------------------------------------------------------

/** Most characters of a command shown in `ps` (the executor's argv may be huge). */
const MAX_COMMAND_CHARS = 4096;

export function formatProcessTable(processes: readonly ProcessInfo[], now = Date.now()): string {
  // SHARES only where some process is shared (harness share): `ID:view(2)` per share, 2 following by it.
  const shared = processes.some((p) => (p.shares?.length ?? 0) > 0);
  const rows = [...processes]
    .sort((a, b) => a.startedAtMs - b.startedAtMs || a.processId.localeCompare(b.processId))
    .map((p) => [
      printable(p.processId),
      p.state === 'exited' || p.state === 'closed' ? `exited(${p.exitCode ?? '?'})` : p.state,
      p.pid === null ? '-' : String(p.pid),
      formatStarted(p.startedAtMs),
      ...(shared ? [formatShares(p, now)] : []),
      printable(commandLine(p.argv)),
    ]);
  const table = [['ID', 'STATE', 'PID', 'STARTED', ...(shared ? ['SHARES'] : []), 'COMMAND'], ...rows];
  const padded = table[0]!.length - 1;
  const widths = Array.from({ length: padded }, (_, column) => Math.max(...table.map((row) => row[column]!.length)));
  return table
    .map((row) =>
      row
        .map((cell, column) => (column < padded ? cell.padEnd(widths[column]!) : cell))
        .join('  ')
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join('');
}

function formatShares(p: ProcessInfo, now: number): string {
  const shares = p.shares ?? [];
  if (shares.length === 0) return '-';
  return shares
    .map((share) => {
      const minutes = Math.max(0, Math.ceil((share.expiresAtMs - now) / 60_000));
      return `${printable(share.shareId)}:${share.access}(${share.attached},${minutes}m)`;
    })
    .join(',');
}

function commandLine(argv: readonly string[]): string {
  const text = argv.map((arg) => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`)).join(' ');
  return text.length > MAX_COMMAND_CHARS ? `${text.slice(0, MAX_COMMAND_CHARS)}…` : text;
}

function formatStarted(ms: number): string {
  const date = new Date(ms);
  if (!Number.isFinite(date.getTime())) return '?';
  return `${date.toISOString().slice(0, 19).replace('T', ' ')}Z`;
}

// kill ---------------------------------------------------------------------------------------------

/** Signal names the protocol carries (extendedSignals), by their usual names and numbers. */
const SIGNALS: ReadonlyArray<{ name: SignalName; aliases: readonly string[] }> = [
  { name: 'terminate', aliases: ['TERM', '15'] },
  { name: 'kill', aliases: ['KILL', '9'] },
  { name: 'interrupt', aliases: ['INT', '2'] },
  { name: 'hangup', aliases: ['HUP', '1'] },
  { name: 'quit', aliases: ['QUIT', '3'] },
  // USR1 and USR2 have different numbers on Linux and macOS: by name only.
  { name: 'user1', aliases: ['USR1'] },
  { name: 'user2', aliases: ['USR2'] },
];
const SIGNAL_NAMES_HELP = 'TERM, KILL, INT, HUP, QUIT, USR1, USR2 (SIG prefix, lower case and 15, 9, 2, 1, 3 work too)';

export function parseSignal(value: string): SignalName {
  const upper = value.trim().toUpperCase().replace(/^SIG/, '');
  for (const { name, aliases } of SIGNALS) {
    if (aliases.includes(upper) || name.toUpperCase() === upper) return name;
  }
  throw new InvalidArgumentError(`unknown signal ${JSON.stringify(value)}: expected ${SIGNAL_NAMES_HELP}`);
}

// attach -------------------------------------------------------------------------------------------

interface AttachFlags {
  interactive: boolean;
  replay: boolean;
  detachKeys?: Buffer;
  token?: string;
  readOnly?: boolean;
}

export const DEFAULT_DETACH_KEYS = 'ctrl-p,ctrl-q';

/**
 * docker's `--detach-keys` format: keys separated by commas, each one character or `ctrl-X` (X a letter,
 * or one of @ [ \ ] ^ _). Answers the bytes the keys send.
 */
export function parseDetachKeys(value: string): Buffer {
  const bytes: number[] = [];
  const keys = value.split(',');
  if (value === '' || keys.length > 8) throw new InvalidArgumentError('expected 1 to 8 keys separated by commas');
  for (const key of keys) {
    const ctrl = /^ctrl-(.)$/i.exec(key);
    if (ctrl) {
      const code = ctrl[1]!.toUpperCase().charCodeAt(0);
      if (code < 0x40 || code > 0x5f) {
        throw new InvalidArgumentError(`${JSON.stringify(key)}: ctrl- takes a letter or one of @ [ \\ ] ^ _`);
      }
      bytes.push(code - 0x40);
    } else if (key.length === 1 && key.charCodeAt(0) >= 0x20 && key.charCodeAt(0) < 0x7f) {
      bytes.push(key.charCodeAt(0));
    } else {
      throw new InvalidArgumentError(`${JSON.stringify(key)}: expected one character or ctrl-X`);
    }
  }
  return Buffer.from(bytes);
}

/**
 * Finds the detach sequence in keyboard input. Bytes that may begin it are held back until the next key
 * says whether it is the sequence (then nothing of it is sent) or not (then they are sent, as docker does).
 */
export class DetachKeyMatcher {
  private matched = 0;

  constructor(private readonly keys: Buffer) {}

  /** The bytes to forward, and whether the sequence was completed (what follows it is dropped). */
  feed(chunk: Buffer): { forward: Buffer; detach: boolean } {
    const out: number[] = [];
    for (const byte of chunk) {
      if (byte === this.keys[this.matched]) {
        this.matched++;
        if (this.matched === this.keys.length) return { forward: Buffer.from(out), detach: true };
        continue;
      }
      // Not the sequence: what was held goes out, and this byte may start it again.
      for (let i = 0; i < this.matched; i++) out.push(this.keys[i]!);
      this.matched = 0;
      if (byte === this.keys[0]) {
        this.matched = 1;
        if (this.keys.length === 1) return { forward: Buffer.from(out), detach: true };
      } else {
        out.push(byte);
      }
    }
    return { forward: Buffer.from(out), detach: false };
  }
}

async function attachCommand(env: Environment, id: string, options: AttachFlags, io: CliIo): Promise<number> {
  let raw = false;
  const newline = () => (raw ? '\r\n' : '\n');
  const note = (text: string) => io.stderr.write(`harness: ${printable(text)}${newline()}`);
  let gapNoted = false;
  // The token is a secret: from the flag, or the variable so that it stays out of the process list.
  const shareToken = options.token ?? io.env.TETHER_HARNESS_SHARE_TOKEN;
  const attached = await env.attach(id, {
    replay: options.replay,
    ...(shareToken ? { shareToken } : {}),
    onGap: (first, last) => {
      if (first === 1 && !gapNoted) note(`earlier output of ${id} is no longer retained by the executor`);
      else note(`output of ${id} was lost (seq ${first}..${last}): the executor no longer retained it`);
      gapNoted = true;
    },
  });
  const info = attached.info!;
  const terminal = info.tty && io.stdin.isTTY === true;
  // Read-only (asked, or all a share gives): the terminal is not taken (no raw mode), Ctrl-C detaches, nothing
  // typed is sent, and the window's size stays the controllers'.
  const watching = options.readOnly === true || info.access === 'view';
  const forwardStdin = !watching && (terminal || options.interactive);
  // A person at a terminal sees their keys echoed while watching: say at once that none of them are sent.
  if (watching && io.stdin.isTTY === true) {
    const why = options.readOnly === true ? '' : ' (all the share allows)';
    note(`watching ${id} read-only${why}: nothing typed here reaches it; Ctrl-C detaches`);
  }
  const cleanups: Array<() => void> = [];
  let stopped: 'keys' | 'interrupt' | null = null;
  const stop = (why: 'keys' | 'interrupt') => {
    if (stopped !== null) return;
    stopped = why;
    attached.dispose();
  };

  if (forwardStdin) {
    if (terminal) {
      io.stdin.setRawMode?.(true);
      raw = true;
    }
    cleanups.push(
      forwardInput(attached, io, {
        closeAtEnd: options.interactive && !terminal,
        rawMode: terminal,
        ...(terminal
          ? {
              keys: {
                watcher: new DetachKeyMatcher(options.detachKeys ?? parseDetachKeys(DEFAULT_DETACH_KEYS)),
                onDetachKeys: () => stop('keys'),
              },
            }
          : {}),
        note,
      }),
    );
  }
  if (!watching && info.tty && io.stdout.isTTY && env.client?.capabilities.has('processResize')) {
    cleanups.push(followWindowSize(attached, io, true));
  }
  // Ctrl-C (not a raw terminal) detaches: the process goes on; `harness kill` ends it.
  const onSigint = () => stop('interrupt');
  process.on('SIGINT', onSigint);
  cleanups.push(() => process.off('SIGINT', onSigint));
  try {
    try {
      return await printOutput(io, attached);
    } catch (err) {
      // Our output has no reader (`| head`): detached quietly, as after Ctrl-C; the process goes on.
      if (err instanceof OutputClosedError) attached.dispose();
      if (stopped === null) throw err;
    }
    const back = shareToken ? `harness attach --token TOKEN ${id}` : `harness attach ${id}`;
    note(`detached from ${id}; it keeps running (${back} to come back)`);
    return stopped === 'keys' ? 0 : 130;
  } finally {
    for (const cleanup of cleanups) cleanup();
  }
}
