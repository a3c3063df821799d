import { createWriteStream } from 'node:fs';
import { TetherError } from '@tether/client';
import { loadNativePipe } from '@tether/native-pipe';
import { durationArg, formatDuration } from '@tether/telemetry/cli';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { type CliIo, connectOptions, report, type SetExit } from '../common.js';
import { channelDialer } from '../reuse/channels.js';
import {
  controlRequest,
  DEFAULT_PERSIST_SECONDS,
  DEFAULT_POOL,
  type MasterSpec,
  REUSE_ENV,
  type RendezvousConnectOptions,
  SPEC_ENV,
  startMaster,
} from '../reuse/client.js';
import { MAX_POOL, Master } from '../reuse/master.js';
import { masterPaths } from '../reuse/paths.js';
import type { ControlReply } from '../reuse/protocol.js';
import { warmChannelSpec } from '../reuse/ready-channel.js';
import { type ConnectFlags, openEnvironment } from '../target.js';

/** A master's log (its stderr, a file in the runtime dir) stops growing here. */
const MAX_LOG_BYTES = 1024 * 1024;

interface MasterFlags extends ConnectFlags {
  persist?: number;
  pool?: number;
  warm?: boolean;
}

const persist = durationArg({ bare: 's', min: 0, max: 7 * 24 * 3600_000, wholeSeconds: true });

/** `--persist`: whole seconds from 0 (no idle timeout) to 7 days, as a duration (a bare number is seconds). */
function parsePersist(value: string): number {
  return persist(value) / 1000;
}

function parsePool(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value.trim()) || n < 1 || n > MAX_POOL) {
    throw new InvalidArgumentError(`expected 1 to ${MAX_POOL}, got ${JSON.stringify(value)}`);
  }
  return n;
}

const CAPTURED = Symbol('captured');

/**
 * The rendezvous options `openEnvironment` resolves from these flags and variables (the same rules as every
 * command, so a master is found under the same name its users compute), without connecting.
 */
async function resolveTarget(
  flags: ConnectFlags,
  env: NodeJS.ProcessEnv,
  environmentId: string | undefined,
): Promise<RendezvousConnectOptions> {
  if (flags.url && !flags.urlFromVariable) {
    throw new TetherError('invalid_argument', 'a master serves registry environments, not --url');
  }
  let target: RendezvousConnectOptions | null = null;
  try {
    await openEnvironment({ ...flags, url: undefined }, env, environmentId, (options) => {
      target = options;
      throw CAPTURED;
    });
  } catch (err) {
    if (err !== CAPTURED) throw err;
  }
  if (target === null) throw new TetherError('invalid_argument', 'no registry environment to start a master for');
  return target;
}

export function registerMaster(program: Command, io: CliIo, setExit: SetExit): void {
  const master = program
    .command('master')
    .description(
      'keep connections to an environment ready in the background, for faster commands (like ssh ControlMaster)',
    )
    .addHelpText(
      'after',
      `
A master holds a few channels to one environment already set up (registry bundle, relay socket, Noise
handshake) and hands one to each command over a unix socket in $XDG_RUNTIME_DIR/tether/ (else
/tmp/tether-$UID/; directory 0700, socket 0600, checked to be this user's before use). Commands use a
running master for the same registry, environment and API key by default; ${REUSE_ENV}=no never does,
${REUSE_ENV}=auto starts one on first use. A command whose master fails connects directly instead, and
a session in progress resumes over a direct connection.

A master also keeps one harness process loaded and waiting (unless --no-warm): a command with no
terminal on its stdin, stdout and stderr hands it those and its arguments, environment and directory,
and it runs the command in its place, over a channel it set up while it waited, about 40 ms sooner than
a new process could (as ssh's client hands its descriptors to its master). A command on a terminal runs
in its own process.

Examples:
  harness master start dev-1          # prints the socket path
  harness exec -- true                # (TETHER_HARNESS_ENVIRONMENT_ID=dev-1) through the master
  harness master status dev-1
  harness master stop dev-1`,
    );

  connectOptions(
    master
      .command('start')
      .description('start a master in the background (a running one is kept) and print its socket path')
      .argument('[env]', 'environment id (default: --environment-id or its variable)')
      .addOption(
        new Option(
          '--persist <duration>',
          `exit after this long with no command using it (30s, 10m, 2h; a bare number is seconds); 0: run until stopped (default ${formatDuration(DEFAULT_PERSIST_SECONDS * 1000)})`,
        ).argParser(parsePersist),
      )
      .addOption(
        new Option('--pool <n>', `channels kept ready, 1-${MAX_POOL} (default ${DEFAULT_POOL})`).argParser(parsePool),
      )
      .addOption(
        new Option(
          '--no-warm',
          'keep no warm process: each command then loads the harness itself (about 40 ms more per command)',
        ),
      ),
  ).action(async (environmentId: string | undefined, flags: MasterFlags) => {
    try {
      const target = await resolveTarget(flags, io.env, environmentId);
      const result = await startMaster(target, io.env, {
        ...(flags.persist !== undefined ? { persistSeconds: flags.persist } : {}),
        ...(flags.pool !== undefined ? { pool: flags.pool } : {}),
        ...(flags.warm === false ? { warm: false } : {}),
      });
      if (!result.started) io.stderr.write(`harness: a master already runs for this environment (pid ${result.pid})\n`);
      io.stdout.write(`${result.socket}\n`);
      setExit(0);
    } catch (err) {
      setExit(report(io, err));
    }
  });

  /**
   * `status` and `stop`: one control request to the environment's master; no master there is exit 1 with
   * the socket named, and `done` writes what the reply means.
   */
  const controlCommand = (
    op: 'status' | 'stop',
    description: string,
    done: (
      reply: Extract<ControlReply, { ok: true }>,
      target: RendezvousConnectOptions,
      socket: string,
    ) => Promise<void>,
  ) =>
    connectOptions(
      master
        .command(op)
        .description(description)
        .argument('[env]', 'environment id (default: --environment-id or its variable)'),
    ).action(async (environmentId: string | undefined, flags: ConnectFlags) => {
      try {
        const target = await resolveTarget(flags, io.env, environmentId);
        const { socket } = masterPaths(target, io.env);
        const reply = await controlRequest(socket, op);
        if (!reply?.ok || reply.op !== op) {
          io.stderr.write(`harness: no master runs for ${target.environmentId} (${socket})\n`);
          setExit(1);
          return;
        }
        await done(reply, target, socket);
        setExit(0);
      } catch (err) {
        setExit(report(io, err));
      }
    });

  controlCommand(
    'status',
    'show whether a master runs for the environment (exit 1 when none)',
    async (reply, _t, socket) => {
      if (reply.op !== 'status') return;
      const s = reply.status;
      io.stdout.write(
        `master pid ${s.pid} for ${s.environmentId} at ${s.registry}: ${s.ready} channel(s) ready, ${s.inUse} in use, ` +
          `${s.persistSeconds ? `exits after ${s.persistSeconds} s idle` : 'no idle timeout'}, since ${s.startedAt}` +
          `${typeof s.warmPid === 'number' ? `, warm process pid ${s.warmPid}${s.warmChannel ? ' (channel ready)' : ''}` : ''}\n` +
          `socket ${socket}\n`,
      );
    },
  );

  controlCommand(
    'stop',
    'stop the master for the environment (commands using it carry on over direct connections)',
    async (_reply, target, socket) => {
      // Gone once its socket is: wait for that (bounded), so a following `start` finds the place free.
      for (let i = 0; i < 100 && (await controlRequest(socket, 'status').catch(() => null)); i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      io.stdout.write(`stopped the master for ${target.environmentId}\n`);
    },
  );

  master
    .command('serve', { hidden: true })
    .description('run a master in the foreground (what `master start` runs; its target comes in TETHER_MASTER_SPEC)')
    .option('--ready-fd <fd>', 'file descriptor to report readiness on, then close', (v) => Number(v))
    .action(async (flags: { readyFd?: number }) => {
      setExit(await serve(io, flags.readyFd));
    });
}

function readSpec(env: NodeJS.ProcessEnv): MasterSpec {
  const text = env[SPEC_ENV];
  if (!text)
    throw new TetherError('invalid_argument', `master serve takes its target in ${SPEC_ENV}; use master start`);
  const spec = JSON.parse(text) as MasterSpec;
  if (
    typeof spec.registryUrl !== 'string' ||
    typeof spec.environmentId !== 'string' ||
    typeof spec.apiKey !== 'string'
  ) {
    throw new TetherError('invalid_argument', `${SPEC_ENV} is not a master target`);
  }
  return spec;
}

async function serve(io: CliIo, readyFd: number | undefined): Promise<number> {
  const ready = readyFd === undefined ? io.stdout : createWriteStream('', { fd: readyFd });
  const tell = (value: unknown) =>
    new Promise<void>((resolve) => {
      ready.write(`${JSON.stringify(value)}\n`);
      if (readyFd === undefined) resolve();
      else ready.end(resolve);
    });
  let written = 0;
  const log = (line: string) => {
    if (written > MAX_LOG_BYTES) return;
    const text =
      written + line.length > MAX_LOG_BYTES
        ? `${new Date().toISOString()} log limit reached; further lines dropped\n`
        : `${new Date().toISOString()} master[${process.pid}] ${line}\n`;
    written += text.length;
    io.stderr.write(text);
  };
  let spec: MasterSpec;
  try {
    spec = readSpec(io.env);
  } catch (err) {
    await tell({ error: (err as Error).message });
    return report(io, err);
  }
  // The key stays in this process's memory only.
  delete io.env[SPEC_ENV];
  if (io.env === process.env) delete process.env[SPEC_ENV];
  let master: Master;
  try {
    const { socket, warm } = masterPaths(spec, io.env);
    const dialer = channelDialer(spec);
    // Each warm process sets up its command's channel itself, pinned to the key this master's channels proved.
    const warmSpec = () => warmChannelSpec(spec, dialer.pin.key, socket);
    master = await Master.start({
      dialer,
      environmentId: spec.environmentId,
      registryUrl: spec.registryUrl,
      socketPath: socket,
      // A warm process takes commands' descriptors through the native pipe addon (not in the single executable).
      ...(spec.warm === false || loadNativePipe() === null ? {} : { warm: { socketPath: warm, spec: warmSpec } }),
      poolSize: spec.pool,
      persistMs: spec.persistSeconds * 1000,
      log,
    });
  } catch (err) {
    log(`start failed: ${(err as Error).message}`);
    await tell({ error: (err as Error).message });
    return 1;
  }
  const stop = (signal: string) => void master.close(`signal ${signal}`);
  const onTerm = () => stop('SIGTERM');
  const onInt = () => stop('SIGINT');
  const onHup = () => log('SIGHUP ignored (the master outlives its terminal; stop it with master stop)');
  process.on('SIGTERM', onTerm);
  process.on('SIGINT', onInt);
  process.on('SIGHUP', onHup);
  await tell({ ready: true });
  await master.closed;
  process.off('SIGTERM', onTerm);
  process.off('SIGINT', onInt);
  process.off('SIGHUP', onHup);
  log('stopped');
  return 0;
}
