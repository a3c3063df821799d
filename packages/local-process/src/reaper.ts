/**
 * Children must not outlive their owner, even when the owner is SIGKILLed. Linux's PR_SET_PDEATHSIG is
 * out of reach from Node (and would cover only the direct child anyway), so one watchdog per owner does
 * it: a `/bin/sh` in its own session, ignoring the usual termination signals, reading `+PGID` / `-PGID`
 * lines from a pipe whose only writer is the owner. When the owner dies, however it dies, the kernel
 * closes that pipe; the watchdog reads EOF, SIGKILLs every group still registered, and exits.
 */
import { spawn } from 'node:child_process';
import type { Socket } from 'node:net';
import type { Reaper } from './types.js';

export interface ProcessReaper extends Reaper {
  /** The watchdog's pid (undefined if it could not be started). */
  readonly pid: number | undefined;
}

/**
 * The watchdog. Groups are kept as a space-separated multiset (a pgid number can recur once its group is
 * gone, so `-PGID` removes one occurrence). Only dash/POSIX builtins run, so it never forks.
 */
const WATCHDOG_SCRIPT = `
set -f
trap '' INT TERM HUP QUIT PIPE
groups=' '
while IFS= read -r line; do
  case $line in
    +*) groups="$groups\${line#+} " ;;
    -*)
      drop=\${line#-}; kept=' '; found=
      for g in $groups; do
        if [ -z "$found" ] && [ "$g" = "$drop" ]; then found=1; else kept="$kept$g "; fi
      done
      groups=$kept ;;
  esac
done
for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done
exit 0
`;

/**
 * Starts the watchdog. Its pipe and process handle are unref'd, so it never keeps the owner's event
 * loop alive. `close()` ends the pipe: the watchdog kills what is still registered (an owner that shut
 * its table down has unregistered everything) and exits; close resolves when it has.
 */
export function createReaper(): ProcessReaper {
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
  return {
    get pid() {
      return child.pid;
    },
    track: (pgid) => send(`+${checkPgid(pgid)}\n`),
    untrack: (pgid) => send(`-${checkPgid(pgid)}\n`),
    close: () => {
      closing ??= (async () => {
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
