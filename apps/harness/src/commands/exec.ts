import { fstatSync, statSync } from 'node:fs';
import {
  checkNetworkHosts,
  type Environment,
  type NetworkDecision,
  type NetworkPolicy,
  type ProcessHandle,
  type SandboxMode,
  sandboxProfile,
  TetherError,
} from '@tether/client';
import { type Command, Option } from 'commander';
import {
  type CliIo,
  connectOptions,
  EXIT,
  keyValue,
  OutputClosedError,
  printable,
  printOutput,
  report,
  type SetExit,
  withEnvironment,
} from '../common.js';
import { randomUuid } from '../random-id.js';
import type { ConnectFlags } from '../target.js';
import { ASK_TIMEOUT_MS, openTerminal, type TerminalAsker, terminalAsker } from './network-ask.js';
import { startDetached } from './processes.js';
import { forwardInput } from './stdin.js';
import { followWindowSize } from './window-size.js';

export function registerExec(program: Command, io: CliIo, setExit: SetExit): void {
  connectOptions(
    runOptions(
      program
        .command('exec')
        .description('run a command on the environment; its output streams here and its exit code becomes ours')
        .usage('[options] -- CMD\u2026')
        .argument('<command...>', 'program and arguments (put -- before them)')
        .option('-t, --tty', 'run in a pseudo-terminal (interactive when stdin is a terminal); sends TERM', false)
        .option(
          '-i, --interactive',
          'forward stdin to the process even when it is a terminal (stdin that is not one is forwarded anyway)',
          false,
        )
        .option('-n, --no-stdin', 'keep the process\u2019s stdin closed (as ssh -n): nothing is read from ours')
        .option(
          '-d, --detach',
          'start detached: print the process id and return at once; it outlives this harness (see ps, attach, kill)',
          false,
        ),
    ),
  )
    .addHelpText('after', `${STDIN_HELP}\n${EXIT_CODES_HELP}`)
    .action(async (argv: string[], options: ConnectFlags & ExecFlags & { detach: boolean }) => {
      // Bad sandbox flags are a usage error before anything connects.
      try {
        sandboxFor(options);
        if (options.stdin === false && options.interactive)
          throw new TetherError('invalid_argument', '-n (--no-stdin) and -i (--interactive) contradict each other');
        if (options.detach && options.sandbox)
          throw new TetherError('invalid_argument', '--sandbox does not go with --detach');
        if (options.detach && networkFor(options))
          throw new TetherError(
            'invalid_argument',
            `${options.networkAsk ? '--network-ask' : '--network-allow'} does not go with --detach`,
          );
      } catch (err) {
        setExit(report(io, err));
        return;
      }
      const run = (env: Environment) =>
        options.detach
          ? startDetached(env, argv, options, io).catch((err) => startFailure(env, err, argv[0] ?? '', options.cwd, io))
          : runRemote(env, argv, options, io);
      setExit(await withEnvironment(io, options, undefined, run));
    });
}

/** The options `exec` and `shell` share: where and with what environment the process starts. */
export function runOptions(command: Command): Command {
  return command
    .option('--cwd <dir>', 'absolute working directory on the environment (default /)')
    .option('-e, --env <NAME=VALUE>', 'set a variable (repeatable)', keyValue, {})
    .option('--clean-env', 'start from an empty environment instead of the executor\u2019s', false)
    .addOption(
      new Option(
        '--sandbox <mode>',
        'run confined, as Codex confines its agent: read-only (nothing writable) or workspace-write (the --cwd directory, /tmp and $TMPDIR writable; .git, .agents, .codex, .aws kept read-only); no network unless --network',
      ).choices(['read-only', 'workspace-write']),
    )
    .option('--writable <dir>', 'with --sandbox workspace-write: another writable directory (repeatable)', collect, [])
    .option('--network', 'with --sandbox: allow the network', false)
    .option(
      '--network-allow <host>',
      'confine the network to this host (repeatable; *.example.com for its subdomains, **.example.com for both): the command reaches it only through a proxy on the environment, nothing else',
      collect,
      [],
    )
    .option(
      '--network-deny <host>',
      'with --network-allow or --network-ask: refuse this host even where an allowed pattern covers it (repeatable)',
      collect,
      [],
    )
    .option(
      '--network-ask',
      'confine the network, and ask on this terminal (/dev/tty) about each host --network-allow does not name before the command reaches it',
      false,
    );
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/** The wire sandbox for the flags, or none; a usage error says what is missing. */
export function sandboxFor(options: ExecFlags): Record<string, unknown> | undefined {
  const confined = networkFor(options) !== undefined;
  if (options.sandbox === undefined) {
    if ((options.writable ?? []).length > 0 || options.network) {
      throw new TetherError('invalid_argument', '--writable and --network go with --sandbox');
    }
    // --network-allow alone: the disk as it is, only the network confined (the executor's default then).
    return undefined;
  }
  if (options.sandbox === 'workspace-write' && options.cwd === undefined) {
    throw new TetherError(
      'invalid_argument',
      '--sandbox workspace-write needs --cwd (the workspace it makes writable)',
    );
  }
  if (options.sandbox === 'read-only' && (options.writable ?? []).length > 0) {
    throw new TetherError('invalid_argument', '--writable goes with --sandbox workspace-write');
  }
  for (const dir of options.writable ?? []) {
    if (!dir.startsWith('/'))
      throw new TetherError('invalid_argument', `--writable needs an absolute directory, got ${JSON.stringify(dir)}`);
  }
  return sandboxProfile(options.sandbox, {
    workspace: options.cwd ?? '/',
    writable: options.writable ?? [],
    // The proxy is the network's one way out: the sandbox lets the command use the network to reach it.
    network: options.network === true || confined,
  });
}

/** The network confinement for the flags (`--network-allow`, `--network-deny`), or none; bad usage throws. */
export function networkFor(options: ExecFlags): NetworkPolicy | undefined {
  const allow = options.networkAllow ?? [];
  const deny = options.networkDeny ?? [];
  if (allow.length === 0 && !options.networkAsk) {
    if (deny.length > 0)
      throw new TetherError('invalid_argument', '--network-deny goes with --network-allow or --network-ask');
    return undefined;
  }
  if (options.network) {
    const confining =
      allow.length > 0 ? '--network-allow only the hosts it names' : '--network-ask only those you allow';
    throw new TetherError('invalid_argument', `--network lets the command reach any host, ${confining}: choose one`);
  }
  if (options.networkAsk && (options.tty || options.interactive)) {
    throw new TetherError(
      'invalid_argument',
      `--network-ask reads its answers from the terminal, which ${options.tty ? '-t' : '-i'} gives to the command: choose one`,
    );
  }
  checkNetworkHosts(allow, '--network-allow');
  checkNetworkHosts(deny, '--network-deny');
  return { allow, deny };
}

export const EXIT_CODES_HELP = `
Exit status: the remote command's own (128+N when a signal N ended it; a process in a terminal that a
signal ended reports 1, as Codex's executor does). 126: the program or the --cwd directory exists but
cannot be run or entered. 127: the program was not found. 130: interrupted (Ctrl-C) before it ended.
141 (128+SIGPIPE): our output's reader went away (\`| head\`): the remote process was stopped at once and
nothing was printed, as a local tool that SIGPIPE ends. 255: the registry, relay or executor could not be
reached or kept, or refused the API key, or the environment is unknown or not the key's. 2: bad usage.
1: another local failure.`;

/** How exec treats stdin, for its help. */
export const STDIN_HELP = `
Stdin: as ssh forwards it. Stdin that is not a terminal (a pipe, a file: \`echo hi | harness exec -- cat\`,
\`harness exec -- sha256sum < file\`) goes to the process, and its end closes the process's stdin. A terminal's
keys go to the process with -t (raw, in the remote pseudo-terminal) or -i; otherwise the process's stdin is
closed at once. -n keeps it closed in every case (as ssh -n: for scripts and loops that read their own stdin).`;

export interface ExecFlags {
  tty: boolean;
  interactive: boolean;
  /** false: `-n`, the process's stdin stays closed. */
  stdin?: boolean;
  cwd?: string;
  env: Record<string, string>;
  cleanEnv: boolean;
  sandbox?: SandboxMode;
  writable?: string[];
  network?: boolean;
  networkAllow?: string[];
  networkDeny?: string[];
  networkAsk?: boolean;
}

/**
 * Runs `argv` on the environment with this terminal attached: output streams here, stdin goes there
 * (`-i`, or `-t` on a terminal), the terminal's size follows the window (SIGWINCH → `process/resize`),
 * Ctrl-C reaches the process. Answers the process's exit code, or 126/127 when it could not start.
 * `exec` and `shell` both run through here.
 */
export async function runRemote(env: Environment, argv: string[], options: ExecFlags, io: CliIo): Promise<number> {
  // As ssh: stdin that is not a terminal (a pipe, a file) is forwarded, and its end closes the process's; a
  // terminal only with -t (raw keys) or -i; never with -n.
  const forwardStdin = options.stdin !== false && (options.interactive || options.tty || io.stdin.isTTY !== true);
  const sandbox = sandboxFor(options);
  let network = networkFor(options);
  const cleanups: Array<() => void> = [];
  if (network && options.networkAsk) {
    let asker: TerminalAsker;
    try {
      asker = terminalAsker(openTerminal());
    } catch (err) {
      return report(io, err);
    }
    cleanups.push(() => asker.close());
    network = { ...network, ask: (question) => asker.ask(question), askTimeoutMs: ASK_TIMEOUT_MS };
  }
  let handle: ProcessHandle;
  try {
    handle = await env.spawn(argv, {
      processId: randomUuid(),
      ...(options.cwd ? { cwd: options.cwd } : {}),
      // As ssh does with a pty: the remote side learns what this terminal is (a -e TERM=… still wins).
      env: options.tty && io.env.TERM ? { TERM: io.env.TERM, ...options.env } : options.env,
      inheritEnv: !options.cleanEnv,
      tty: options.tty,
      stdin: forwardStdin,
      ...(options.tty && io.stdout.rows && io.stdout.columns
        ? { size: { rows: io.stdout.rows, cols: io.stdout.columns } }
        : {}),
      ...(sandbox ? { sandbox } : {}),
      ...(network ? { network, onNetworkDecision: reportDenials(io) } : {}),
    });
  } catch (err) {
    for (const cleanup of cleanups.splice(0)) cleanup();
    return startFailure(env, err, argv[0] ?? '', options.cwd, io);
  }
  if (forwardStdin) {
    const rawMode = options.tty && io.stdin.isTTY === true;
    if (rawMode) io.stdin.setRawMode?.(true);
    // /dev/null has nothing to read: its end is sent at once. Read, it waited for a thread of the pool, and
    // the command's exit for that read (a few ms of `harness exec -- true < /dev/null`, more under load).
    if (isDevNull(io.stdin)) void handle.closeStdin().catch(() => undefined);
    else cleanups.push(forwardInput(handle, io, { closeAtEnd: true, rawMode }));
  }
  if (options.tty && io.stdout.isTTY && resizeSupported(env)) cleanups.push(followWindowSize(handle, io));
  // Without a terminal in raw mode, Ctrl-C is our SIGINT: it goes to the process (with a pty in raw mode it
  // is a byte the remote terminal turns into the signal). The exit code is then the process's (130 for
  // one that SIGINT ended, as ssh reports it).
  const onSigint = () => void handle.signal('interrupt').catch(() => undefined);
  process.on('SIGINT', onSigint);
  cleanups.push(() => process.off('SIGINT', onSigint));
  try {
    return await printOutput(io, handle);
  } catch (err) {
    // Our output has no reader (`| head`): the process is stopped at once, as the one before head in a
    // local pipeline is by SIGPIPE, and the harness exits 141 without a word.
    if (err instanceof OutputClosedError) {
      for (const cleanup of cleanups.splice(0)) cleanup();
      await handle.terminate().catch(() => undefined);
    }
    throw err;
  } finally {
    for (const cleanup of cleanups) cleanup();
  }
}

/** Whether `stream` reads the null device (`< /dev/null`, a service's stdin), by its descriptor. */
function isDevNull(stream: CliIo['stdin']): boolean {
  const fd = (stream as { fd?: unknown }).fd;
  if (typeof fd !== 'number') return false;
  try {
    const stat = fstatSync(fd);
    return stat.isCharacterDevice() && stat.rdev === statSync('/dev/null').rdev;
  } catch {
    return false;
  }
}

/** `process/resize` is Tether's (advertised); Codex's executor keeps the size the process started with. */
function resizeSupported(env: Environment): boolean {
  return env.client === null || env.client.capabilities.has('processResize');
}

/**
 * The executor answers a failed `process/start` with the OS error alone, in Codex's words (`No such file
 * or directory (os error 2)`), for the program and the cwd alike. The harness says which, as a shell
 * would: `harness: prog: not found` (127), `harness: prog: Permission denied` (126), and for a --cwd that
 * is missing or no directory (asked of the executor with fs/getMetadata) names the directory (126).
 */
async function startFailure(
  env: Environment,
  err: unknown,
  program: string,
  cwd: string | undefined,
  io: CliIo,
): Promise<number> {
  const os = osError(err);
  if (os === null) throw err;
  if (cwd !== undefined && CWD_ERRORS.has(os.errno) && !(await isDirectory(env, cwd))) {
    io.stderr.write(`harness: --cwd ${printable(cwd)}: ${cwdProblem(os)}\n`);
    return EXIT.cannotRun;
  }
  const name = printable(program);
  if (os.errno === ENOENT) {
    io.stderr.write(`harness: ${name}: not found\n`);
    return EXIT.notFound;
  }
  io.stderr.write(`harness: ${name}: ${os.text}\n`);
  return EXIT.cannotRun;
}

const ENOENT = 2;
const ENOTDIR = 20;
/** The errors a bad cwd gives (ENOENT, EACCES, ENOTDIR): the program is named only when the cwd is fine. */
const CWD_ERRORS = new Set([ENOENT, 13, ENOTDIR]);

function cwdProblem(os: { errno: number; text: string }): string {
  if (os.errno === ENOENT) return 'no such directory';
  if (os.errno === ENOTDIR) return 'not a directory';
  return os.text;
}

async function isDirectory(env: Environment, path: string): Promise<boolean> {
  try {
    return (await env.fs.getMetadata(path)).isDirectory;
  } catch {
    return false;
  }
}

/**
 * The OS error in a failed start: Rust's `io::Error` text that both executors answer with (`Permission
 * denied (os error 13)`), or, for a name not found on PATH for a terminal, Codex's portable-pty text
 * (`Unable to spawn NAME because: No viable candidates found in PATH …`). The one place where the harness
 * reads an error's text: the executor sends no other trace of it. null for any other failure (which is
 * reported as it is).
 */
function osError(err: unknown): { errno: number; text: string } | null {
  if (!(err instanceof TetherError) || err.code !== 'rpc') return null;
  const match = /:\s*([^:()]{1,200}) \(os error (\d{1,4})\)$/.exec(err.message);
  if (match) return { errno: Number(match[2]), text: match[1]! };
  if (/^process\/start: Unable to spawn .* because:\s+No viable candidates found in PATH/s.test(err.message)) {
    return { errno: ENOENT, text: 'No such file or directory' };
  }
  return null;
}

/** What the proxy's reasons mean to the person who typed the flags. */
const DENIAL_WORDS: Record<string, string> = {
  not_allowed: 'not named by --network-allow',
  denied: 'named by --network-deny',
  denied_by_user: 'you answered no',
  not_allowed_local: 'a local or private address (allow it by its exact name or address)',
  method_not_allowed: 'a method the proxy does not pass',
  mitm_required: 'not passed by the proxy',
};

/**
 * Says on stderr, once per host, port and reason, what the proxy refused the command (it answered the command
 * 403, which a tool may report in words of its own, or not at all).
 */
function reportDenials(io: CliIo): (decision: NetworkDecision) => void {
  const said = new Set<string>();
  return (decision) => {
    if (decision.decision !== 'deny') return;
    const key = `${decision.host}:${decision.port}:${decision.reason}`;
    if (said.has(key) || said.size >= 100) return;
    said.add(key);
    // The host comes from the executor (untrusted): no control characters reach the terminal.
    const host = printable(decision.host);
    const why = DENIAL_WORDS[decision.reason] ?? 'refused';
    io.stderr.write(`harness: network: refused ${host}:${decision.port}: ${why}\n`);
  };
}
