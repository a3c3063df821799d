import { type EnvScheme, packageVersion, SchemeCommand } from '@tether/telemetry/cli';
import { type Command, CommanderError } from 'commander';
import { registerCompletion } from './commands/completion.js';
import { registerConfig } from './commands/config.js';
import { registerCp } from './commands/cp.js';
import { registerExec } from './commands/exec.js';
import { registerFiles } from './commands/files.js';
import { registerForward } from './commands/forward.js';
import { registerLogin } from './commands/login.js';
import { registerMaster } from './commands/master.js';
import { registerProcesses } from './commands/processes.js';
import { registerRecording } from './commands/recording.js';
import { registerShare } from './commands/share.js';
import { registerShell } from './commands/shell.js';
import { type CliIo, EXIT, flushOutput, report, watchOutput } from './common.js';
import { DEPRECATED_ENV, ENV } from './target.js';

export { stdinSource } from './commands/stdin.js';
export type { CliIo } from './common.js';
export { holdChannel } from './reuse/ready-channel.js';

export const VERSION = packageVersion(import.meta.url, '@tether/harness');

/**
 * The harness's flags and their variables (`TETHER_HARNESS_<FLAG>`; README "Flags and variables"). The older
 * connection variables are still read, with a warning, after the flag and its variable and before the
 * config file's context; so is the key's (TETHER_API_KEY, which the executor also read), by the preAction hook.
 */
export const HARNESS_ENV: EnvScheme = {
  app: 'harness',
  deprecatedVariables: {
    '--context': [DEPRECATED_ENV.context],
    '--registry': [DEPRECATED_ENV.registry],
    '--environment-id': [DEPRECATED_ENV.environmentId],
    '--url': [DEPRECATED_ENV.url],
    '--connect-timeout': [DEPRECATED_ENV.connectTimeout],
    '--allow-insecure-registry': [DEPRECATED_ENV.allowInsecureRegistry],
    '--api-key-file': [DEPRECATED_ENV.apiKeyFile],
    '--executor-key': [DEPRECATED_ENV.executorKey],
  },
  renamedFlags: { 'config set-context --environment': '--environment-id' },
  variables: [
    {
      name: ENV.apiKey,
      what: 'the harness API key itself, where no --api-key-file is given',
      commands: ['every command with --api-key-file'],
      secret: true,
      deprecated: [DEPRECATED_ENV.apiKey],
    },
    {
      name: 'TETHER_HARNESS_SHARE_TOKEN',
      what: 'the share token, where no --token is given: it stays out of the process list',
      commands: ['attach'],
      secret: true,
    },
  ],
  // A share token is a secret: never a default in --help, never its value in an error.
  secrets: ['--token'],
  withoutVariables: {
    'config set-context': 'it writes the config file: a variable would be written into it unseen',
    'master serve': 'internal: started by `harness master start`',
    // One name for it, the one that says what it holds (the flag's own would be TETHER_HARNESS_TOKEN).
    'attach --token': 'read from TETHER_HARNESS_SHARE_TOKEN',
  },
};

type Register = (program: Command, io: CliIo, setExit: (code: number) => void) => void;

/** The commands each `register…` adds, in the order of the help (completion needs every command: not narrowed). */
export const COMMANDS: ReadonlyArray<readonly [readonly string[], Register]> = [
  [['exec'], registerExec],
  [['shell'], registerShell],
  [['ps', 'attach', 'kill'], registerProcesses],
  [['share'], registerShare],
  [['cp'], registerCp],
  [['ls', 'cat'], registerFiles],
  [['forward'], registerForward],
  [['master'], registerMaster],
  [['config'], registerConfig],
  [['login'], registerLogin],
  [['recording'], registerRecording],
  [[], registerCompletion],
];

/**
 * Builds the program; `run` gives each action its IO and collects the exit code. With `argv`, a program for
 * what it runs: only the command it names first, when it does.
 */
/**
 * Commander writes a help in pieces (the options, then each `addHelpText`): joined into one write at the end of
 * the tick, so `harness exec --help | head -2` ends as `ls --help | head -2` does (exit 0: the whole text fits
 * the pipe before head closes it), not by the EPIPE of a second write the reader no longer takes.
 */
function coalesced(write: (text: string) => void): (text: string) => void {
  let pending: string[] | null = null;
  return (text) => {
    if (pending !== null) {
      pending.push(text);
      return;
    }
    pending = [text];
    queueMicrotask(() => {
      const whole = (pending as string[]).join('');
      pending = null;
      write(whole);
    });
  };
}

export function buildProgram(io: CliIo, setExit: (code: number) => void, argv?: readonly string[]): Command {
  const program = new SchemeCommand('harness', HARNESS_ENV, { env: io.env })
    .description(
      'Tether harness: run processes and move files on an environment, end-to-end encrypted through the relay.',
    )
    .version(VERSION)
    .configureOutput({
      writeOut: coalesced((text) => io.stdout.write(text)),
      writeErr: (text) => io.stderr.write(text),
    })
    .exitOverride()
    .addHelpText(
      'after',
      `
Connection: --registry URL and --environment-id ID (or ${ENV.registry}, ${ENV.environmentId}),
with a harness API key in ${ENV.apiKey} (or a file only you may read: --api-key-file). Or name a
context of the config file (harness config; --context): a flag beats its variable (TETHER_HARNESS_<FLAG>),
which beats the context. Flags go before or after the command: harness --registry URL exec … is
harness exec --registry URL …. --url ws://HOST:PORT talks to an executor directly (no relay; then ENV:/path
names a path on that executor). Connecting is retried with backoff for up to 20s (--connect-timeout) after
failures that may pass (an unreachable registry, relay or executor); the bound covers every phase (the
registry call, the relay socket, the handshake, initialize) and the retries. A refused key, or an
environment that is unknown or not the key's, fails at once. The older variables
(TETHER_REGISTRY_URL, TETHER_ENVIRONMENT_ID, TETHER_API_KEY, TETHER_API_KEY_FILE, …) are still read for one
more release, each with a warning naming its replacement.
Remote paths are written ENV:/absolute/path. The registry call and the relay socket go through
HTTPS_PROXY / HTTP_PROXY / ALL_PROXY, except hosts in NO_PROXY (as Codex reads them; loopback is not exempt).

Security: an http:// registry must be on loopback (127.0.0.0/8, ::1, localhost) unless
--allow-insecure-registry (TETHER_HARNESS_ALLOW_INSECURE_REGISTRY=1); use https:// otherwise. The executor's key is
pinned for the session: a reconnect to another key fails. A copy from an environment refuses entry names
that are not one path component and never writes outside the destination or through a symbolic link in it.

Exit status: the remote command's own; 126 or 127 when it cannot be run or is not found (as a shell says);
255 when the registry, relay or executor cannot be reached or kept, refuses the key, or the environment is
unknown or not the key's (as ssh does); 141 (128+SIGPIPE) when our output's reader went away (| head): the
command stops at once, a remote process with it, and says nothing, as a local tool that SIGPIPE ends; 2 for
bad usage (one line, then see COMMAND --help); 1 for other failures, e.g. a local file that is missing.

Stdin that is not a terminal is forwarded to exec's process, as ssh forwards it (-n keeps it closed).

Examples:
  harness exec -- uname -a
  harness exec --tty -- bash
  harness shell dev-1
  harness config set-context dev --registry https://registry.example.com --environment-id dev-1 --use
  harness cp ./build.tar.gz dev-1:/tmp/build.tar.gz
  harness cp -r dev-1:/var/log/app ./logs
  harness ls dev-1:/tmp
  harness cat dev-1:/etc/hostname
  harness login --web dev-1`,
    );

  program.hook('preAction', (_program, action) => {
    // The key by value has no flag: its older name is said where a command takes a key and would read it.
    const takesKey = action.options.some((option) => option.long === '--api-key-file');
    if (takesKey && action.getOptionValue('apiKeyFile') === undefined && !io.env[ENV.apiKey]?.trim()) {
      if (io.env[DEPRECATED_ENV.apiKey]?.trim()) {
        program.deprecations.warn(DEPRECATED_ENV.apiKey, ENV.apiKey, 'the executor read it too, as its own');
      }
    }
    // --url from a variable serves only commands without a location (target.ts).
    if (action.getOptionValueSource('url') === 'env') action.setOptionValue('urlFromVariable', true);
  });

  // A command named first (`harness exec …`, the common case) gets a program of that command alone: making
  // every command's options was about 8 ms of each start (measured on `harness exec -- true`), and with the
  // command first, nothing else is parsed (flags before the command, help, suggestions for a misspelt
  // command and `completion` get the whole program). cli.test.ts checks this table against the program.
  const first = argv?.[0];
  const only = COMMANDS.find(([names]) => first !== undefined && names.includes(first));
  for (const [, register] of only ? [only] : COMMANDS) register(program, io, setExit);
  oneLineUsageErrors(program);
  return program;
}

/** What a missing argument is, in a usage error (`harness exec: missing the command to run …`). */
const ARGUMENT_NAMES: Record<string, string> = {
  command: 'the command to run',
  source: 'the source',
  destination: 'the destination',
  location: 'the location',
  id: 'the process id',
  spec: 'the forward spec',
};

/**
 * A usage error is one line that names the command and points to its help, not the whole help:
 * `harness exec: missing the command to run (harness exec [options] -- CMD…; see harness exec --help)`.
 */
function oneLineUsageErrors(command: Command): void {
  const path: string[] = [];
  for (let at: Command | null = command; at; at = at.parent) path.unshift(at.name());
  const name = path.join(' ');
  command.showHelpAfterError(false).configureOutput({
    outputError: (text, write) => {
      let message = text.trim().replace(/^error: /, '');
      const missing = /^missing required argument '([^']+)'$/.exec(message);
      if (missing) {
        const argument = missing[1] as string;
        message = `missing ${ARGUMENT_NAMES[argument] ?? `the ${argument} argument`}`;
      }
      const usage = command.parent ? `${name} ${command.usage()}; ` : '';
      write(`${name}: ${message} (${usage}see ${name} --help)\n`);
    },
  });
  for (const sub of command.commands) oneLineUsageErrors(sub);
}

/**
 * Parses and runs; resolves with the process exit code. `wholeProgram` builds every command whatever `argv`
 * names (tests compare the two).
 */
export async function run(argv: string[], io: CliIo, options: { wholeProgram?: boolean } = {}): Promise<number> {
  let code = 0;
  // Before anything is written: a write error (EPIPE when the reader went away) is never an unhandled 'error'.
  watchOutput(io);
  const program = buildProgram(
    io,
    (value) => {
      code = value;
    },
    options.wholeProgram ? undefined : argv,
  );
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (err instanceof CommanderError) code = err.exitCode === 0 ? 0 : EXIT.usage;
    else throw err;
  }
  // What was written last may have failed after the command ended (a pipe reports EPIPE a tick later).
  try {
    await flushOutput(io);
  } catch (err) {
    if (code === 0) code = report(io, err);
  }
  return code;
}
