/**
 * Warm processes: what makes a command through a connection master start as fast as ssh's multiplexed
 * client. A master (`harness master start`) keeps one harness process beside it with the CLI bundle already
 * loaded, waiting on `<runtime dir>/<master>.warm.sock`. A command started with no terminal on its stdio
 * hands that process its stdin, stdout and stderr (SCM_RIGHTS), its arguments, environment, working
 * directory and umask, and waits for its exit status; the warm process runs the command exactly as the
 * command's own process would (the same bundle, on the same descriptors), and the master starts the next
 * one. This is ssh's ControlMaster design (its client passes its descriptors to the master): the command's
 * own process then costs Node's start and this module, not the bundle's load (about 40 ms of a 75 ms start).
 *
 * - Only the user's own: the runtime directory must be the user's, mode 0700, the socket the user's, 0600;
 *   the warm process checks its peer's uid (SO_PEERCRED) and takes nothing from anyone else.
 * - Only the same code: a request carries the Node binary, its flags, the bundle and the NODE_*, UV_* and
 *   TETHER_NATIVE_* variables; a warm process of another build declines, and the command runs itself.
 * - Never twice: the warm process answers `accepted`, and runs only once the command says `go`. A command
 *   that gets no answer in time closes the socket and runs itself; the warm process, finding no `go`,
 *   runs nothing.
 * - Signals the command's process gets (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are sent on to the warm process;
 *   one the warm process dies of is raised again in the command's own, so the caller sees the same end.
 * - Terminals are left out: a process outside the terminal's foreground group could not read it or set its
 *   mode. A command with a terminal on any of fds 0-2, `TETHER_REUSE=no`, and the `master` commands always
 *   run in their own process.
 */
import { chmodSync, closeSync, fstatSync, lstatSync, readdirSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { isatty } from 'node:tty';
import type { NativePipe } from '@tether/native-pipe';
import { encodeFrame } from './reuse/protocol.js';
import { ownershipProblem, reuseSetting, runtimeDir, WARM_SOCKET_SUFFIX } from './reuse/runtime-dir.js';

/** The argument a master starts its warm process with (with WARM_SOCKET_ENV and fd 3, a pipe from the master). */
export const WARM_ARG = '__tether-warm-process';
export const WARM_SOCKET_ENV = 'TETHER_WARM_SOCKET';
/** The command whose code cache a warm process loads (and may update): the one most run through a master. */
export const WARM_COMMAND = 'exec';
/** Fd 3 of a warm process, a pipe from its master: hung up once the master is gone; `taken\n` is written to it. */
const MASTER_FD = 3;
const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;
type ForwardedSignal = (typeof FORWARDED_SIGNALS)[number];
/** An environment is a few KiB; Linux allows an argument list and environment of up to 2 MiB together. */
const MAX_REQUEST_BYTES = 4 * 1024 * 1024;
/** How long a warm process waits for the rest of a request, and for `go`. */
const REQUEST_WAIT_MS = 2_000;
/** How long a command waits for a warm process to answer before it runs itself. */
const ANSWER_WAIT_MS = 5_000;

interface WarmRequest {
  version: 1;
  /** The command's arguments (process.argv from index 2) and its argv[1]. */
  args: string[];
  entry: string;
  env: Record<string, string>;
  cwd: string;
  umask: number;
  /** `runtimeIdentity` of the command's process: a warm process of other code declines. */
  runtime: string;
}

/** What must be the same for a warm process to run a command as the command's own process would. */
export function runtimeIdentity(bundle: string, main: string, env: NodeJS.ProcessEnv): string {
  const variables = Object.entries(env)
    .filter(([name]) => /^(NODE_|UV_|TETHER_NATIVE_)/.test(name))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([process.execPath, process.version, process.execArgv, bundle, main, variables]);
}

/** Newline-delimited JSON objects a peer sends on the link, after the request: at most this long each. */
const MAX_LINE_BYTES = 4096;

/**
 * The JSON objects of `link`'s lines, each to `onMessage` until it answers true (a line that is not one is
 * skipped); more than MAX_LINE_BYTES without a newline are dropped and reported to `onOverflow`.
 */
function readMessages(
  link: Socket,
  onMessage: (message: Record<string, unknown>) => boolean,
  onOverflow: () => void,
): void {
  let received = '';
  link.setEncoding('utf8');
  link.on('data', (chunk: string) => {
    received += chunk;
    if (received.length > MAX_LINE_BYTES) {
      received = '';
      return onOverflow();
    }
    for (let newline = received.indexOf('\n'); newline !== -1; newline = received.indexOf('\n')) {
      const line = received.slice(0, newline);
      received = received.slice(newline + 1);
      let message: unknown;
      try {
        message = JSON.parse(line);
      } catch {
        continue; // not ours to act on
      }
      if (typeof message === 'object' && message !== null && onMessage(message as Record<string, unknown>)) return;
    }
  });
}

// The command's side -----------------------------------------------------------------------------------

/**
 * Runs the command `args` in a master's warm process when there is one that takes it: its exit status, or
 * null when the command is to run in this process (no warm process, one of another build, a terminal on
 * fds 0-2, `TETHER_REUSE=no`, a `master` command, no native addon).
 */
export async function runWarm(
  args: string[],
  native: NativePipe | null,
  runtime: () => string,
): Promise<number | null> {
  if (native === null || args[0] === 'master' || args[0] === WARM_ARG || reuseSetting(process.env) === 'no') {
    return null;
  }
  for (const fd of [0, 1, 2]) {
    try {
      fstatSync(fd);
    } catch {
      return null; // a closed standard descriptor cannot be handed over
    }
    if (isatty(fd)) return null;
  }
  const dir = runtimeDir(process.env);
  let names: string[];
  try {
    if (ownershipProblem(dir, 'directory') !== null) return null;
    names = readdirSync(dir).filter((name) => name.endsWith(WARM_SOCKET_SUFFIX));
  } catch {
    return null;
  }
  if (names.length === 0) return null;
  const request: WarmRequest = {
    version: 1,
    args,
    entry: process.argv[1] ?? '',
    env: Object.fromEntries(
      Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined),
    ),
    cwd: process.cwd(),
    umask: process.umask(),
    runtime: runtime(),
  };
  const frame = encodeFrame(request);
  for (const name of names) {
    const path = join(dir, name);
    let socket: number;
    try {
      if (ownershipProblem(path, 'socket') !== null) continue;
      socket = native.connectUnix(path);
    } catch {
      continue; // gone, or nobody listening (its master died): the next, or this process
    }
    let pid: number | null = null;
    try {
      pid = offer(native, socket, frame);
    } catch {
      pid = null;
    }
    if (pid !== null) return follow(socket, pid);
    closeSync(socket);
  }
  return null;
}

function writeAll(fd: number, data: Buffer): void {
  for (let offset = 0; offset < data.length; ) offset += writeSync(fd, data, offset);
}

/**
 * One line from the blocking socket `fd` (at most 4 KiB), or null when none came in `ms` or it closed. Read a
 * byte at a time, so nothing after the line is taken from whoever reads the socket next (a line is a few
 * dozen bytes).
 */
function readLine(native: NativePipe, fd: number, ms: number): string | null {
  const deadline = Date.now() + ms;
  const buffer = Buffer.alloc(4096);
  for (let length = 0; length < buffer.length; length++) {
    const left = deadline - Date.now();
    if (left <= 0 || !native.waitReadable(fd, left)) return null;
    if (readSync(fd, buffer, length, 1, null) === 0) return null;
    if (buffer[length] === 10) return buffer.toString('utf8', 0, length);
  }
  return null;
}

/** Offers the command to the warm process on `socket`: its pid once it accepted and was told to go, else null. */
function offer(native: NativePipe, socket: number, frame: Buffer): number | null {
  for (const fd of [0, 1, 2]) native.sendFd(socket, fd);
  writeAll(socket, frame);
  const line = readLine(native, socket, ANSWER_WAIT_MS);
  if (line === null) return null;
  const answer = JSON.parse(line) as { accepted?: unknown; pid?: unknown };
  if (answer.accepted !== true || typeof answer.pid !== 'number') return null;
  writeAll(socket, Buffer.from('go\n'));
  return answer.pid;
}

/** Waits for the warm process's exit status, sending it the signals this process gets meanwhile. */
function follow(socket: number, pid: number): Promise<number> {
  return new Promise((resolve) => {
    const link = new Socket({ fd: socket, readable: true, writable: true });
    let lastSignal: ForwardedSignal | null = null;
    let ended = false;
    const handlers = FORWARDED_SIGNALS.map((signal) => {
      const handler = () => {
        lastSignal = signal;
        link.write(`${JSON.stringify({ signal })}\n`);
      };
      process.on(signal, handler);
      return [signal, handler] as const;
    });
    const end = (status: number | null) => {
      if (ended) return;
      ended = true;
      for (const [signal, handler] of handlers) process.off(signal, handler);
      link.destroy();
      if (status !== null) return resolve(status);
      if (lastSignal !== null) {
        // It died of the signal we passed on: so does this process (with the handler gone, Node's default).
        process.kill(process.pid, lastSignal);
        return resolve(128 + (process.getBuiltinModule('node:os').constants.signals[lastSignal] ?? 0));
      }
      process.stderr.write(
        `harness: the warm process (pid ${pid}) running this command ended without an exit status\n`,
      );
      resolve(255);
    };
    readMessages(
      link,
      ({ exit }) => {
        if (typeof exit !== 'number' || !Number.isInteger(exit)) return false;
        end(exit & 0xff);
        return true;
      },
      () => end(null),
    );
    link.on('error', () => undefined);
    link.on('close', () => end(null));
  });
}

// The warm process's side ------------------------------------------------------------------------------

export interface Taken<T, R> {
  /** The command's arguments; process.argv, env, cwd, umask and fds 0-2 are the command's already. */
  args: string[];
  loaded: T;
  /** What `hold` made of the master's spec (the command's ready channel), null when it sent none. */
  ready: R | null;
}

/** What the accepting thread and the warm process's main thread say to each other in `state[0]`. */
const ACCEPT_WAITING = 0;
const ACCEPT_NEXT = 1;
const ACCEPT_DONE = 2;
/** The argument the accepting thread runs main.js with (`acceptInWorker`). */
export const WARM_ACCEPT_ARG = '__tether-warm-accept';
/** The master's spec line on fd 3: a few KiB (the executor key's ML-KEM half is 1.6 KiB in base64). */
const MAX_SPEC_BYTES = 64 * 1024;

/**
 * Runs as a master's warm process (`WARM_ARG`), with the bundle loaded (`loaded`): reads its master's spec from
 * fd 3 and gives it to `hold` (which sets up the command's channel ahead, in this thread's event loop), listens
 * on WARM_SOCKET_ENV's path, and waits until a command of this user and this code hands itself over; then it
 * becomes that command's process. A thread of its own blocks in accept (`acceptInWorker`) so that the event
 * loop here keeps the held channel alive (the relay pings it). Exits when its master is gone (fd 3 hung up).
 */
export async function serveWarm<T, R extends { close(): void }>(
  native: NativePipe,
  runtime: (env: NodeJS.ProcessEnv) => string,
  loaded: T,
  /** The script the accepting thread runs (main.js, which hands it to `acceptInWorker`). */
  script: URL,
  /** Sets up the command's channel from the master's spec, and says when it is ready (or lost) with `tell`. */
  hold: (spec: unknown, tell: (ready: boolean) => void) => R | null,
): Promise<Taken<T, R>> {
  const path = process.env[WARM_SOCKET_ENV];
  delete process.env[WARM_SOCKET_ENV];
  let masterPipe = false;
  try {
    const stat = fstatSync(MASTER_FD); // libuv's 'pipe' is a socket pair
    masterPipe = stat.isSocket() || stat.isFIFO();
  } catch {
    // reported below
  }
  if (!path || !masterPipe) {
    process.stderr.write(`harness: ${WARM_ARG} is started by a connection master only\n`);
    process.exit(2);
  }
  const own = runtime(process.env);
  const spec = readSpec(native);
  try {
    if (lstatSync(path).isSocket()) unlinkSync(path); // an earlier warm process's, killed before it removed it
  } catch {
    // none
  }
  const listener = native.listenUnix(path);
  chmodSync(path, 0o600);
  warmUp();
  let ready: R | null = null;
  try {
    const tell = (channelReady: boolean) => {
      try {
        writeSync(MASTER_FD, channelReady ? 'ready\n' : 'unready\n');
      } catch {
        // the master is gone: so will this process be
      }
    };
    ready = spec === null ? null : hold(spec, tell);
  } catch (err) {
    process.stderr.write(`harness: warm process: no channel of its own: ${(err as Error).message}\n`);
  }
  const gone = () => {
    // The master is gone: so is this process, and its socket.
    try {
      unlinkSync(path);
    } catch {
      // gone already
    }
    process.exit(0);
  };
  const { Worker } = process.getBuiltinModule('node:worker_threads');
  const state = new Int32Array(new SharedArrayBuffer(4));
  const offer = await new Promise<Offer>((resolve) => {
    const worker = new Worker(script, {
      argv: [WARM_ACCEPT_ARG],
      workerData: { listener, state },
      stdout: false,
      stderr: false,
    });
    worker.on('error', (err) => {
      process.stderr.write(`harness: warm process: its accepting thread failed: ${err.message}\n`);
      gone();
    });
    worker.on('message', (message: { socket?: number; gone?: boolean }) => {
      if (typeof message.socket !== 'number') return gone();
      const taken = take(native, message.socket, own);
      Atomics.store(state, 0, taken === null ? ACCEPT_NEXT : ACCEPT_DONE);
      Atomics.notify(state, 0);
      if (taken === null) return;
      worker.unref();
      resolve(taken);
    });
  });
  unlinkSync(path);
  closeSync(listener);
  try {
    writeSync(MASTER_FD, 'taken\n');
  } catch {
    // the master is gone; the command runs all the same
  }
  closeSync(MASTER_FD);
  becomeCommand(native, offer.socket, offer);
  return { args: offer.request.args, loaded, ready };
}

/**
 * The warm process's accepting thread (main.js run with WARM_ACCEPT_ARG in a worker): blocks in accept on the
 * listener, hands each connection to the main thread and waits for its verdict; ends once one was taken, or
 * when the master is gone (fd 3 readable or hung up).
 */
export function acceptInWorker(native: NativePipe): void {
  const { isMainThread, parentPort, workerData } = process.getBuiltinModule('node:worker_threads');
  if (isMainThread || parentPort === null) {
    process.stderr.write(`harness: ${WARM_ACCEPT_ARG} is a warm process's own thread\n`);
    process.exit(2);
  }
  const { listener, state } = workerData as { listener: number; state: Int32Array };
  for (;;) {
    const socket = native.acceptUnix(listener, MASTER_FD);
    if (socket === null) {
      parentPort.postMessage({ gone: true });
      return;
    }
    Atomics.store(state, 0, ACCEPT_WAITING);
    parentPort.postMessage({ socket });
    Atomics.wait(state, 0, ACCEPT_WAITING);
    if (Atomics.load(state, 0) === ACCEPT_DONE) return;
  }
}

/**
 * The master's spec line from fd 3 (written as soon as it started this process), parsed; null when none came
 * in time or it is not JSON. Nothing else is ever written there, so reading past the line takes nothing.
 */
function readSpec(native: NativePipe): unknown {
  let length = 0;
  const deadline = Date.now() + REQUEST_WAIT_MS;
  const buffer = Buffer.allocUnsafe(MAX_SPEC_BYTES);
  while (length < MAX_SPEC_BYTES) {
    const left = deadline - Date.now();
    if (left <= 0 || !native.waitReadable(MASTER_FD, left)) return null;
    const got = readSync(MASTER_FD, buffer, length, MAX_SPEC_BYTES - length, null);
    if (got === 0) return null;
    const newline = buffer.indexOf(10, length);
    length += got;
    if (newline !== -1 && newline < length) {
      try {
        return JSON.parse(buffer.toString('utf8', 0, newline));
      } catch {
        return null;
      }
    }
  }
  return null;
}

/**
 * Loads and runs once what every command's start needs from Node and is not part of the bundle: a socket
 * (the link to the command's process; stdin or stdout on a pipe) and the file streams (stdin on a file or
 * /dev/null). Each cost 5-10 ms on a command's first use of it.
 */
function warmUp(): void {
  new Socket().destroy();
  void process.getBuiltinModule('node:fs').ReadStream;
}

interface Offer {
  request: WarmRequest;
  fds: number[];
  /** The link to the command's process. */
  socket: number;
}

/** Reads and answers one offer on `socket`; the offer once the command said `go`, else null (all closed). */
function take(native: NativePipe, socket: number, own: string): Offer | null {
  const fds: number[] = [];
  let ok = false;
  try {
    if (native.peerUid(socket) !== process.getuid?.()) return null;
    for (let i = 0; i < 3; i++) {
      if (!native.waitReadable(socket, REQUEST_WAIT_MS)) return null;
      const fd = native.receiveFd(socket);
      if (fd === null) return null;
      fds.push(fd);
    }
    const request = readRequest(native, socket);
    if (request === null) return null;
    const answer = (value: unknown) => writeAll(socket, Buffer.from(`${JSON.stringify(value)}\n`));
    if (request.runtime !== own) {
      answer({ declined: 'another build, Node or Node settings' });
      return null;
    }
    try {
      process.chdir(request.cwd);
    } catch {
      answer({ declined: 'cannot enter its working directory' });
      return null;
    }
    answer({ accepted: true, pid: process.pid });
    if (readLine(native, socket, REQUEST_WAIT_MS) !== 'go') return null;
    ok = true;
    return { request, fds, socket };
  } catch {
    return null;
  } finally {
    if (!ok) {
      for (const fd of fds) closeSync(fd);
      closeSync(socket);
    }
  }
}

function readRequest(native: NativePipe, socket: number): WarmRequest | null {
  const read = (length: number): Buffer | null => {
    const buffer = Buffer.allocUnsafe(length);
    for (let offset = 0; offset < length; ) {
      if (!native.waitReadable(socket, REQUEST_WAIT_MS)) return null;
      const got = readSync(socket, buffer, offset, length - offset, null);
      if (got === 0) return null;
      offset += got;
    }
    return buffer;
  };
  const header = read(4);
  if (header === null) return null;
  const length = header.readUInt32BE(0);
  if (length > MAX_REQUEST_BYTES) return null;
  const body = read(length);
  if (body === null) return null;
  const value = JSON.parse(body.toString('utf8')) as Partial<WarmRequest>;
  const strings = (list: unknown): list is string[] => Array.isArray(list) && list.every((s) => typeof s === 'string');
  if (
    value.version !== 1 ||
    !strings(value.args) ||
    typeof value.entry !== 'string' ||
    typeof value.cwd !== 'string' ||
    typeof value.runtime !== 'string' ||
    !Number.isInteger(value.umask) ||
    typeof value.env !== 'object' ||
    value.env === null ||
    !Object.values(value.env).every((v) => typeof v === 'string')
  ) {
    return null;
  }
  return value as WarmRequest;
}

/** Takes on the command's descriptors, environment, arguments and umask, and reports its end to it. */
function becomeCommand(native: NativePipe, socket: number, { request, fds }: Offer): void {
  for (const [target, fd] of fds.entries()) {
    native.dup2(fd, target);
    closeSync(fd);
  }
  process.umask(request.umask);
  for (const name of Object.keys(process.env)) delete process.env[name];
  Object.assign(process.env, request.env);
  process.argv.splice(1, process.argv.length - 1, request.entry, ...request.args);
  process.on('exit', (code) => {
    try {
      writeSync(socket, `${JSON.stringify({ exit: code })}\n`);
    } catch {
      // the command's process is gone
    }
  });
  const link = new Socket({ fd: socket, readable: true, writable: false });
  readMessages(
    link,
    ({ signal }) => {
      if (FORWARDED_SIGNALS.includes(signal as ForwardedSignal)) process.kill(process.pid, signal as ForwardedSignal);
      return false;
    },
    () => undefined,
  );
  // The command's process went away without waiting for the end (killed): as its terminal hanging up.
  link.on('end', () => process.kill(process.pid, 'SIGHUP'));
  link.on('error', () => undefined);
  link.unref();
}
