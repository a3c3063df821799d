import type { ExecSupport } from './key-handover.js';
import type { Logger } from './logger.js';

/** What the executor does to its own process at start, through `@tether/native-pipe` (key-handover.ts's ExecSupport). */

/** Set to `1` to leave the executor dumpable (debuggers, core dumps); by default remote mode is not. */
export const DUMPABLE_ENV = 'TETHER_EXECUTOR_DUMPABLE';

/** How many inherited descriptors became close-on-exec, or why none could. */
export type InheritedDescriptors = { marked: number } | { problem: string };

/**
 * Remote mode holds the key in memory: a non-dumpable process cannot be ptrace'd or have its
 * /proc/<pid>/{mem,environ} read by other processes of the same user (root keeps CAP_SYS_PTRACE).
 * Children are unaffected: exec makes them dumpable again.
 */
export function protectMemory(env: NodeJS.ProcessEnv, exec: ExecSupport, log: Logger): void {
  if (/^(1|true|yes)$/i.test(env[DUMPABLE_ENV] ?? '')) {
    log.warn(`${DUMPABLE_ENV} is set: same-user processes can read this executor's memory (and its API key)`);
    return;
  }
  const unprotected =
    'cannot mark the executor non-dumpable: same-user processes can read its memory (and its API key)';
  if (!exec.setDumpable) {
    log.warn({ reason: `@tether/native-pipe: ${exec.unavailableReason ?? 'no setDumpable'}` }, unprotected);
    return;
  }
  try {
    exec.setDumpable(false);
  } catch (err) {
    log.warn({ reason: (err as Error).message }, unprotected);
  }
}

/**
 * A descriptor left open by whoever started the executor (fd 100 on a host file, say) would be inherited
 * by every command: bubblewrap passes it into a sandbox too, where a write through it reaches the host
 * file that a read-only mount protects from `open`. sshd closes such descriptors for its sessions; here
 * every descriptor above 2 becomes close-on-exec (none is closed: Node's and libuv's own have the flag
 * already). What a command is meant to get still reaches it: libuv dup2s a child's stdio array into
 * place, which clears the flag on the copy (bubblewrap's seccomp fd 3, pipes from @tether/native-pipe).
 */
export function markInheritedCloseOnExec(exec: ExecSupport): InheritedDescriptors {
  if (!exec.setCloexecAbove) {
    return { problem: `@tether/native-pipe: ${exec.unavailableReason ?? 'no setCloexecAbove'}` };
  }
  try {
    return { marked: exec.setCloexecAbove(2) };
  } catch (err) {
    return { problem: (err as Error).message };
  }
}

/** Says what `markInheritedCloseOnExec` did, once there is a logger. */
export function reportInherited(inherited: InheritedDescriptors, log: Logger): void {
  if ('problem' in inherited) {
    log.warn(
      { reason: inherited.problem },
      'cannot make inherited descriptors close-on-exec: any descriptor above 2 this executor inherited from its launcher reaches every command it runs, sandboxed ones included (a write through one bypasses the sandbox)',
    );
  } else if (inherited.marked > 0) {
    log.info({ descriptors: inherited.marked }, 'inherited descriptors made close-on-exec');
  }
}
