/**
 * Detached processes (capability `processDetach`, exec-protocol's detached.ts): processes that belong to
 * the executor instead of the session that started them. They outlive every session, until they exit
 * (then they stay readable for the executor's retention, 10 minutes by default), within the executor's
 * `--max-detached-processes`. Sessions of the API key that started one (and admin keys) can list it, attach
 * to it (several at once), write to its stdin, resize its terminal and signal it; to other keys it does not
 * exist, unless its owner shares it (`shareProcess`: a token another key attaches with, for `view` or `control`,
 * until it expires or `unshareProcess` revokes it).
 *
 * Environment's `spawnDetached`, `listProcesses`, `attach` and `kill` are thin members over this file.
 */

import { DEFAULT_HIGH_WATER_BYTES, LOW_WATER_FRACTION, PROCESS_READ_MAX_BYTES } from '@tether/bytes';
import {
  detachedProcessIdProblem,
  Method,
  type Participant,
  PROCESS_DETACH_CAPABILITY,
  PROCESS_SHARE_CAPABILITY,
  type ProcessAttachResult,
  type ProcessListEntry,
  type ProcessShareResult,
  type ShareAccess,
} from '@tether/exec-protocol';
import type { ProcessEvent, SignalName } from './backend.js';
import { TetherError } from './errors.js';
import type { ExecServerClient } from './exec-client.js';
import { ProcessEvents } from './process-events.js';
import { processStartParams } from './start-params.js';

/** One principal following a process (`AttachOptions.onParticipants`). */
export type { Participant };

/** One process as `process/list` shows it (exec-protocol's entry; `detached` always said). */
export type ProcessInfo = Omit<ProcessListEntry, 'detached'> & {
  /** Belongs to the executor (started detached) rather than to this session. */
  detached: boolean;
};

/** How a command is started, spawned or detached (Environment's `spawn` adds its own options to these). */
export interface CommandOptions {
  /** Absolute path; default: the environment's default directory (local: process.cwd(); remote: `/`). */
  cwd?: string;
  /** Variables added over the executor's own environment, or the exact environment with `inheritEnv: false`. */
  env?: Record<string, string>;
  inheritEnv?: boolean;
  tty?: boolean;
  /** Keep stdin open for writes, now or by a later `attach` (always true with a tty). */
  stdin?: boolean;
  /** Process-visible argv[0]. */
  arg0?: string;
  /** Terminal size at start (tty only). */
  size?: { rows: number; cols: number };
  /**
   * Spawned: any string, default a random UUID. Detached: 1–64 of A-Z a-z 0-9 . _ - , unique on the executor,
   * default 8 random hex digits.
   */
  processId?: string;
}

export type SpawnDetachedOptions = CommandOptions;

export interface AttachOptions {
  /**
   * Replay the output the executor still retains before following (default true); false follows from
   * what comes next.
   */
  replay?: boolean;
  /**
   * Output the executor no longer retained when it was read (a replay of more than its retention, or an
   * attacher that fell behind a fast process): seqs `first`..`last` are missing. Not an error: a detached
   * process never waits for its readers.
   */
  onGap?: (first: number, last: number) => void;
  /** Undelivered bytes above which pushed output is left to be read at the consumer's pace. Default 512 KiB. */
  highWaterBytes?: number;
  /**
   * A token from the owner's `share` (capability `processShare`): attach to a process another key owns, with
   * the access the share gives (`view`: output only; `control`: stdin, resize and signals too).
   */
  shareToken?: string;
  /**
   * Who follows the process (capability `processShare`): called at the attach and whenever that changes (an
   * attach, a session gone, a share redeemed or revoked); also kept in `AttachedProcess.participants`.
   */
  onParticipants?: (participants: Participant[]) => void;
}

/** Most entries a `process/list` answer may have (the executor's limits are far below). */
const MAX_LISTED_PROCESSES = 100_000;
/**
 * A quiet attachment reads once in a while: a notification dropped while the connection was congested, with
 * nothing after it, would otherwise go unnoticed. From 1 s, doubling to 8 s while nothing comes.
 */
const IDLE_READ_FIRST_MS = 1000;
const IDLE_READ_MAX_MS = 8000;

/** Throws unless `client` is an executor that offers detached processes. */
export function requireDetach(client: ExecServerClient | null): ExecServerClient {
  if (client === null) {
    throw new TetherError('invalid_state', 'detached processes need a remote executor; a local environment has none');
  }
  if (!client.capabilities.has(PROCESS_DETACH_CAPABILITY)) {
    throw new TetherError(
      'invalid_state',
      `this executor does not offer detached processes (capability ${PROCESS_DETACH_CAPABILITY}; codex exec-server and older executors do not): run the command attached instead`,
    );
  }
  return client;
}

/** What `CommandOptions` ask of `process/start`, each default filled in (`defaultCwd` where no `cwd`). */
export function commandStart(options: CommandOptions, defaultCwd: string) {
  return {
    cwd: options.cwd ?? defaultCwd,
    env: options.env ?? {},
    inheritEnv: options.inheritEnv ?? true,
    tty: options.tty ?? false,
    pipeStdin: options.stdin ?? false,
    arg0: options.arg0 ?? null,
    size: options.size ?? null,
  };
}

/** Starts a detached process; resolves with its id once it runs. */
export async function spawnDetached(
  client: ExecServerClient | null,
  argv: string[],
  options: SpawnDetachedOptions = {},
): Promise<{ processId: string }> {
  const executor = requireDetach(client);
  if (argv.length === 0) throw new TetherError('invalid_argument', 'argv must not be empty');
  const processId = options.processId ?? Buffer.from(crypto.getRandomValues(new Uint8Array(4))).toString('hex');
  const problem = detachedProcessIdProblem(processId);
  if (problem !== null) throw new TetherError('invalid_argument', problem);
  const params = {
    ...processStartParams({ processId, argv, ...commandStart(options, '/') }),
    detached: true,
  };
  const answer = await executor.call(Method.processStart, params);
  // An executor that ignored the flag started a process bound to this session: it would die with it.
  if (answer.detached !== true) {
    await executor.call(Method.processTerminate, { processId }).catch(() => undefined);
    throw new TetherError('protocol', 'the executor did not start the process detached');
  }
  return { processId };
}

/** `process/list`: this session's processes and the executor's detached ones, checked (the executor is untrusted). */
export async function listProcesses(client: ExecServerClient | null): Promise<ProcessInfo[]> {
  const executor = requireDetach(client);
  const list = await executor.call(Method.processList, {});
  if (list.processes.length > MAX_LISTED_PROCESSES) {
    throw new TetherError(
      'protocol',
      `the executor listed ${list.processes.length} processes; at most ${MAX_LISTED_PROCESSES} are accepted`,
    );
  }
  return list.processes.map((entry) => ({ ...entry, detached: entry.detached === true }));
}

/**
 * Signals a detached (or this session's) process. `process/signal` is silent for an unknown or ended process,
 * so the list is asked first: those are errors here.
 */
export async function killProcess(
  client: ExecServerClient | null,
  processId: string,
  signal: SignalName = 'terminate',
): Promise<void> {
  const executor = requireDetach(client);
  const found = (await listProcesses(executor)).find((entry) => entry.processId === processId);
  if (found === undefined) throw new TetherError('invalid_state', `unknown process id ${processId}`);
  if (found.state === 'exited' || found.state === 'closed') {
    throw new TetherError('invalid_state', `process ${processId} has already exited (exit code ${found.exitCode})`);
  }
  await executor.call(Method.processSignal, { processId, signal });
}

/** Follows a detached process: replays what is retained, then its output as it comes, to its end. */
export async function attachProcess(
  client: ExecServerClient | null,
  processId: string,
  options: AttachOptions = {},
): Promise<AttachedProcess> {
  const executor = requireDetach(client);
  // Listening before asking: the first notifications can come before the answer.
  const attached = new AttachedProcess(processId, executor, options);
  try {
    let info: ProcessAttachResult;
    try {
      if (options.shareToken !== undefined && !executor.capabilities.has(PROCESS_SHARE_CAPABILITY)) {
        throw new TetherError(
          'invalid_state',
          `this executor does not offer shared processes (capability ${PROCESS_SHARE_CAPABILITY})`,
        );
      }
      info = await executor.call(Method.processAttach, {
        processId,
        ...(options.shareToken === undefined ? {} : { shareToken: options.shareToken }),
      });
    } catch (err) {
      // The executor's message says which id (unknown process id …).
      throw err instanceof TetherError && err.code === 'rpc'
        ? new TetherError('invalid_state', err.message.replace(/^process\/attach: /, ''), {
            cause: err,
            ...(err.rpcCode === undefined ? {} : { rpcCode: err.rpcCode }),
          })
        : err;
    }
    if (info.processId !== processId) throw new TetherError('protocol', 'process/attach answered for another process');
    attached.begin({ ...info, detached: info.detached === true }, options.replay ?? true);
  } catch (err) {
    attached.dispose();
    throw err;
  }
  return attached;
}

/**
 * An attachment to a detached process: the same surface as a spawned ProcessHandle (ProcessEvents: events in
 * seq order, `completion`, stdin, resize, signals). Events come as pushed notifications while they continue
 * the sequence and the consumer keeps up; otherwise, and for the replay, they are read (`process/read`), so
 * memory stays bounded by the high-water mark and one read. Output the executor dropped before it could be
 * read is skipped (`onGap`), since a detached process never waits for its readers.
 */
export class AttachedProcess extends ProcessEvents {
  /** The process when it was attached (null until then). */
  info: ProcessInfo | null = null;
  /** Seqs skipped because the executor no longer retained them. */
  lostSeqs = 0;
  /** Who follows the process, as the executor last said (`AttachOptions.onParticipants`); [] until it says. */
  participants: Participant[] = [];
  private began = false;
  /** A read loop runs; pushed events are kept aside meanwhile (bounded), to continue after it. */
  private reading = false;
  private readAgain = false;
  private idleTimer: NodeJS.Timeout | null = null;
  private idleDelay = IDLE_READ_FIRST_MS;
  /** Something was pushed since the idle timer was set: no read is due yet. */
  private active = false;

  constructor(
    processId: string,
    private readonly client: ExecServerClient,
    private readonly options: AttachOptions = {},
  ) {
    super(processId, client, options.highWaterBytes ?? DEFAULT_HIGH_WATER_BYTES);
    this.unsubscribe.push(
      client.subscribe((event) => {
        if (event.processId === this.processId) this.onPushed(event);
      }),
      // Notifications were lost with the connection: read what was missed.
      client.onReconnect(() => this.read()),
      client.onClosed((error) => this.fail(error)),
      // The share it came in by was revoked (or expired): the process is gone to this session.
      client.onAccessRevoked(processId, () =>
        this.fail(new TetherError('invalid_state', `access to process ${processId} was revoked by its owner`)),
      ),
      client.onParticipants(processId, (participants) => {
        this.participants = participants;
        options.onParticipants?.(participants);
      }),
    );
  }

  /** @internal The attach was answered: start with the replay (or at the current end). */
  begin(info: ProcessInfo, replay: boolean): void {
    this.info = info;
    this.began = true;
    if (!replay) this.cursor = Math.max(0, info.nextSeq - 1);
    this.read();
  }

  // Delivery ---------------------------------------------------------------------------------------

  private onPushed(event: ProcessEvent): void {
    if (!this.began || this.ended || event.seq <= this.cursor) return;
    if (this.reading) {
      this.keepAside(event);
      return;
    }
    // A full queue: leave it to a read once the consumer has caught up.
    if (this.queuedBytes > this.highWater) {
      this.readAgain = true;
      return;
    }
    if (event.seq !== this.cursor + 1) {
      // A notification went missing (dropped while the connection was congested): read from the cursor.
      this.read();
      this.keepAside(event);
      return;
    }
    this.enqueue(event);
    this.active = true;
  }

  private skip(first: number, last: number): void {
    this.lostSeqs += last - first + 1;
    this.cursor = last;
    try {
      this.options.onGap?.(first, last);
    } catch {
      // The callback's failure is not the attachment's.
    }
  }

  /** Starts the read loop, or has the running one read once more. */
  private read(): void {
    if (!this.began || this.ended || this.settled) return;
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    this.reading = true;
    this.readAgain = false;
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.idleTimer = null;
    this.readLoop().then(
      () => {
        this.reading = false;
        if (!this.ended && !this.settled) this.armIdleRead();
      },
      (err: Error) => {
        this.reading = false;
        this.fail(err);
      },
    );
  }

  private async readLoop(): Promise<void> {
    for (;;) {
      await this.waitForRoom();
      if (this.ended || this.settled) return;
      this.readAgain = false;
      const answer = await this.client.read(this.processId, this.cursor, {
        maxBytes: PROCESS_READ_MAX_BYTES,
        waitMs: 0,
      });
      if (this.ended || this.settled) return;
      for (const chunk of answer.chunks) {
        if (chunk.seq <= this.cursor) continue;
        const gap = chunk.seq - this.cursor - 1;
        if (gap === 1 && answer.exited && this.exitCode === null && answer.exitCode !== null) {
          // Output after the exit (a descendant held the pipe): the one missing seq is the exit itself.
          this.enqueue({ kind: 'exited', processId: this.processId, seq: this.cursor + 1, exitCode: answer.exitCode });
        } else if (gap > 0) {
          this.skip(this.cursor + 1, chunk.seq - 1);
        }
        this.enqueueOutput(chunk);
      }
      if (answer.chunks.length > 0) continue;
      if (answer.closed) {
        // Read to the end: the exit and close have the last two seqs the executor handed out.
        const closeSeq = Math.max(this.cursor + 1, answer.nextSeq - 1);
        if (this.exitCode === null) {
          if (answer.exitCode === null)
            throw new TetherError('protocol', `process ${this.processId} closed without an exit status`);
          if (closeSeq - 1 > this.cursor + 1) this.skip(this.cursor + 1, closeSeq - 2);
          this.enqueue({
            kind: 'exited',
            processId: this.processId,
            seq: Math.max(this.cursor + 1, closeSeq - 1),
            exitCode: answer.exitCode,
          });
        }
        this.enqueue({ kind: 'closed', processId: this.processId, seq: Math.max(this.cursor + 1, closeSeq) });
        return;
      }
      // Caught up with what is retained: continue with what was pushed meanwhile, if it follows on.
      const pending = this.aside.filter((event) => event.seq > this.cursor).sort((a, b) => a.seq - b.seq);
      const overflowed = this.asideOverflowed;
      this.clearAside();
      this.asideOverflowed = false;
      if (overflowed) continue;
      for (const event of pending) {
        if (event.seq !== this.cursor + 1) {
          this.readAgain = true;
          break;
        }
        this.enqueue(event);
        if (this.ended) return;
      }
      if (!this.readAgain) return;
    }
  }

  /** Reads after a quiet while (see IDLE_READ_FIRST_MS); pushed events meanwhile put it off and start the backoff over. */
  private armIdleRead(): void {
    if (this.idleTimer !== null) return;
    this.idleTimer = setTimeout(() => {
      this.idleTimer = null;
      if (this.active) {
        this.active = false;
        this.idleDelay = IDLE_READ_FIRST_MS;
        this.armIdleRead();
        return;
      }
      this.idleDelay = Math.min(this.idleDelay * 2, IDLE_READ_MAX_MS);
      this.read();
    }, this.idleDelay);
    // The attachment's consumer keeps the process alive, not this timer (a web page's timers are numbers).
    (this.idleTimer as { unref?: () => void }).unref?.();
  }

  /** The consumer made room: a reader waiting for it goes on, and what was left for later is read. */
  protected override roomMade(): void {
    super.roomMade();
    if (this.queuedBytes <= this.highWater * LOW_WATER_FRACTION && this.readAgain && !this.reading) this.read();
  }

  protected override stopListening(): void {
    super.stopListening();
    if (this.idleTimer !== null) clearTimeout(this.idleTimer);
    this.idleTimer = null;
  }
}

export interface ShareOptions {
  /** `view` (output only; the default) or `control` (stdin, resize, signals and terminate too). */
  access?: ShareAccess;
  /** How long the share lasts, in seconds (default an hour, at most a week). */
  ttlSec?: number;
}

/** Shares a detached process this key owns: a secret token for `attach(processId, {shareToken})`. */
export async function shareProcess(
  client: ExecServerClient | null,
  processId: string,
  options: ShareOptions = {},
): Promise<ProcessShareResult> {
  const executor = requireShare(client);
  return executor.call(Method.processShare, {
    processId,
    access: options.access ?? 'view',
    ...(options.ttlSec === undefined ? {} : { ttlSec: options.ttlSec }),
  });
}

/** Revokes one share of the process (`shareId`), or all of them; answers how many ended. */
export async function unshareProcess(
  client: ExecServerClient | null,
  processId: string,
  shareId?: string,
): Promise<number> {
  const executor = requireShare(client);
  const { revoked } = await executor.call(Method.processUnshare, {
    processId,
    ...(shareId === undefined ? {} : { shareId }),
  });
  return revoked;
}

function requireShare(client: ExecServerClient | null): ExecServerClient {
  const executor = requireDetach(client);
  if (!executor.capabilities.has(PROCESS_SHARE_CAPABILITY)) {
    throw new TetherError(
      'invalid_state',
      `this executor does not offer shared processes (capability ${PROCESS_SHARE_CAPABILITY})`,
    );
  }
  return executor;
}
