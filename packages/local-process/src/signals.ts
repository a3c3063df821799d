/** Signals to a child's group and the teardown kill of it and its strays. */
import { descendantsOf } from './proc.js';

/** Most descendants a kill looks for beyond the group (a fork bomb in the group dies with the group). */
const MAX_STRAYS = 4096;

/**
 * process.kill on the negative pid: the whole group. ESRCH (no such group: gone, or not yet made) is not
 * an error; with `orLeader` the signal then goes to the process `pgid` itself (ESRCH there neither).
 */
export function signalGroup(pgid: number, signal: NodeJS.Signals, orLeader = false): void {
  for (const target of orLeader ? [-pgid, pgid] : [-pgid]) {
    try {
      process.kill(target, signal);
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
    }
  }
}

/**
 * The teardown kill: SIGKILL to the group and to every descendant still linked to the child by parents,
 * so one that left the group (setsid, setpgid: a daemon, `setsid sleep &` under a shell that waits) dies
 * too. The descendants are stopped first and looked for again, so none forks meanwhile; all before the
 * group dies, since a dead parent's children are reparented out of the tree. A descendant already
 * orphaned (its parent exited earlier) is not in the tree: only a subreaper finds it (orphans.ts).
 */
export function killGroupAndStrays(pid: number): void {
  // The child first: running, it would see its children die before its own SIGKILL arrives, and a shell
  // in `wait` then exits 0 on its own (under load, often), where one group kill reports 137 as Codex does.
  signalProcess(pid, 'SIGSTOP');
  try {
    const first = descendantsOf(pid, MAX_STRAYS);
    for (const descendant of first) signalProcess(descendant, 'SIGSTOP');
    const strays = new Set([...first, ...(first.length > 0 ? descendantsOf(pid, MAX_STRAYS) : [])]);
    // Stopped, they cannot fork; killed before the group, so that a failing group kill leaves none stopped.
    for (const stray of strays) signalProcess(stray, 'SIGKILL');
    signalGroup(pid, 'SIGKILL');
  } finally {
    // Not left stopped, whatever failed above.
    signalProcess(pid, 'SIGKILL');
  }
}

/**
 * process.kill on one descendant, best effort: gone already (ESRCH), or not ours to signal (EPERM: a
 * setuid program), is no reason to stop the teardown; the group kill that follows reports real failures.
 */
function signalProcess(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // See above.
  }
}
