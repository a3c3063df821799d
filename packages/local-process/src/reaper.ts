/**
 * Children must not outlive their owner, even when the owner is SIGKILLed. Linux's PR_SET_PDEATHSIG is
 * out of reach from Node (and would cover only the direct child anyway), so one watchdog per owner does
 * it: a `/bin/sh` in its own session, ignoring the usual termination signals, reading `+PGID` / `-PGID`
 * lines from a pipe whose only writer is the owner. When the owner dies, however it dies, the kernel
 * closes that pipe; the watchdog reads EOF, SIGKILLs every group still registered, and exits.
 *
 * A descendant that leaves its group (setsid, setpgid) escapes that kill. With `subreaper` the owner
 * also adopts orphaned descendants (orphans.ts) and registers their groups here, so they die with it too.
 */
import { spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import { type ChildLedger, OrphanAdopter } from './orphans.js';
import type { Reaper } from './types.js';

export interface ReaperOptions {
  /**
   * Make the owner a child subreaper (Linux, with @tether/native-pipe built) and adopt orphaned
   * descendants: reaped as they exit, killed with the owner (even SIGKILLed, once a sweep saw them), at
   * `close()`, and with the teardown of the process whose session they are in. Only for a process that
   * notes every child it spawns in `adopter` (the executor: its tables and fs helpers are given it): any
   * other child of it would be taken for an orphan. Default false (the SDK's local backend runs inside
   * someone's program).
   */
  subreaper?: boolean;
}

export interface ProcessReaper extends Reaper {
  /** The watchdog's pid (undefined if it could not be started). */
  readonly pid: number | undefined;
  /** Whether orphaned descendants are adopted (`subreaper` asked for, and available here). */
  readonly subreaper: boolean;
  /** Adopted orphans not yet reaped (empty without `subreaper`). */
  readonly adopted: readonly number[];
  /**
   * The orphan adopter (null without `subreaper`): its owner hands it to everything that spawns (a
   * ProcessTable's `adopter`, any other child it starts) to note its own children, which are not orphans.
   */
  readonly adopter: ChildLedger | null;
}

/**
 * The watchdog. It keeps a space-separated multiset of kill targets: `-PGID` for a group, `PID` for one
 * process (an adopted orphan, which may leave its group at any time). A line `+TARGET` adds one, `-TARGET`
 * removes one occurrence (a number can recur once its group is gone). Only dash/POSIX builtins run, so it
 * never forks.
 */
const WATCHDOG_SCRIPT = `
set -f
trap '' INT TERM HUP QUIT PIPE
targets=' '
while IFS= read -r line; do
  case $line in
    +*) targets="$targets\${line#+} " ;;
    -*)
      drop=\${line#-}; kept=' '; found=
      for t in $targets; do
        if [ -z "$found" ] && [ "$t" = "$drop" ]; then found=1; else kept="$kept$t "; fi
      done
      targets=$kept ;;
  esac
done
for t in $targets; do kill -s KILL -- "$t" 2>/dev/null; done
exit 0
`;

/**
 * Starts the watchdog. Its pipe and process handle are unref'd, so it never keeps the owner's event
 * loop alive. `close()` ends the pipe: the watchdog kills what is still registered (an owner that shut
 * its table down has unregistered everything) and exits; close resolves when it has.
 */
export function createReaper(options: ReaperOptions = {}): ProcessReaper {
  const child = spawn('/bin/sh', ['-c', WATCHDOG_SCRIPT], {
    stdio: ['pipe', 'ignore', 'ignore'],
    cwd: '/',
    // Own session and process group: a terminal's ^C or a kill of the owner's group does not reach it.
    detached: true,
  });
  // A pipe to a child is a net.Socket, which can be unref'd.
  const stdin = child.stdin as Socket;
  let alive = true;
  const exited = new Promise<void>((resolve) => {
    child.once('exit', () => {
      alive = false;
      resolve();
    });
    child.once('error', () => {
      alive = false;
      resolve();
    });
  });
  // EPIPE when the watchdog is gone; nothing to protect then.
  stdin.on('error', () => {});
  child.unref();
  stdin.unref();

  let closing: Promise<void> | null = null;
  const send = (line: string): void => {
    if (alive && closing === null) stdin.write(line);
  };
  const track = (pgid: number) => send(`+-${checkPgid(pgid)}\n`);
  const untrack = (pgid: number) => send(`--${checkPgid(pgid)}\n`);
  const trackPid = (pid: number) => send(`+${checkPgid(pid)}\n`);
  const untrackPid = (pid: number) => send(`-${checkPgid(pid)}\n`);
  // After the watchdog's spawn: it is a child of ours from before adoption began.
  const adopter = options.subreaper === true ? OrphanAdopter.start({ track, untrack, trackPid, untrackPid }) : null;
  return {
    get pid() {
      return child.pid;
    },
    get subreaper() {
      return adopter !== null;
    },
    get adopted() {
      return adopter?.adopted ?? [];
    },
    adopter,
    track,
    untrack,
    killSession: (sid) => adopter?.killSession(sid),
    close: () => {
      closing ??= (async () => {
        // The orphans first: killed and reaped while the watchdog still holds their groups.
        await adopter?.close();
        if (alive) child.ref();
        stdin.end();
        await exited;
      })();
      return closing;
    },
  };
}

function checkPgid(pgid: number): number {
  if (!Number.isSafeInteger(pgid) || pgid <= 1) throw new RangeError(`not a process group id: ${pgid}`);
  return pgid;
}
