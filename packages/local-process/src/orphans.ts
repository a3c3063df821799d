/**
 * Adopting orphans: a descendant that leaves its process group (setsid, setpgid) escapes every group kill,
 * and once its parent exits it is reparented to init, out of reach. As a child subreaper (Linux
 * PR_SET_CHILD_SUBREAPER, through @tether/native-pipe) this process gets such orphans as children instead.
 * Node reaps only the children it spawned, so the adopted ones are found here, reaped when they exit (no
 * zombies pile up), registered with the watchdog (the owner's death kills them, however it dies), and
 * killed when the owner closes its reaper or tears down the process whose session they are in.
 *
 * Finding them: every child of this process that it did not spawn itself is adopted. "Spawned itself"
 * means through `child_process` (ChildProcess.prototype.spawn is wrapped to note each pid), node-pty in
 * spawn.ts (`markOwnChild`), or before adoption started (a subreaper adopts nothing before it is one).
 * A child made any other way (another addon's fork, a worker thread's child_process) would be taken for
 * an orphan, killed at close and reaped behind its owner's back: only the executor, which spawns nothing
 * else, turns adoption on.
 *
 * Cost: a sweep reads this process's children (one small /proc file per thread) and does one
 * `waitpid(WNOHANG)` per adopted orphan; it runs on SIGCHLD (coalesced), every ADOPTION_SWEEP_MS while
 * adoption is on, and at teardown.
 */
import { ChildProcess } from 'node:child_process';
import { loadNativePipe, type NativePipe } from '@tether/native-pipe';
import { childrenOf, procStat } from './proc.js';

/**
 * How often orphans are looked for without a SIGCHLD: one whose parent was a grandchild (no SIGCHLD here)
 * is registered with the watchdog at most this late. The window in which an owner SIGKILLed at once
 * would leave it behind.
 */
export const ADOPTION_SWEEP_MS = 1_000;
/** At close, how long to keep killing and reaping orphans before leaving what is left to init. */
const CLOSE_REAP_MS = 2_000;

/** Children this process spawned itself; their own handles (libuv, node-pty) reap them. */
const ownChildren = new Set<number>();

/** A child that node-pty (or anything but child_process) spawned: not an orphan. */
export function markOwnChild(pid: number): void {
  ownChildren.add(pid);
}

/** The child was reaped by its owner. */
export function forgetOwnChild(pid: number): void {
  ownChildren.delete(pid);
}

let spawnsRecorded = false;
/** At most one adopter per process: two would each take the other's orphans for theirs. */
let active: OrphanAdopter | null = null;

/**
 * Notes the pid of every child_process child from now on (ChildProcess.prototype.spawn is what spawn,
 * exec, execFile and fork call). False when Node has no such method, and adoption is then refused.
 */
function recordChildProcessSpawns(): boolean {
  if (spawnsRecorded) return true;
  const prototype = ChildProcess.prototype as unknown as {
    spawn?: (this: ChildProcess, ...args: unknown[]) => unknown;
  };
  const original = prototype.spawn;
  if (typeof original !== 'function') return false;
  prototype.spawn = function spawn(this: ChildProcess, ...args: unknown[]) {
    const result = original.apply(this, args);
    const pid = this.pid;
    if (pid !== undefined) {
      ownChildren.add(pid);
      this.once('exit', () => ownChildren.delete(pid));
    }
    return result;
  };
  spawnsRecorded = true;
  return true;
}

/** Where adopted orphans and their groups are registered: the watchdog (reaper.ts). */
export interface GroupRegistry {
  track(pgid: number): void;
  untrack(pgid: number): void;
  /** One process: an orphan may leave its group (setsid) between two sweeps. */
  trackPid(pid: number): void;
  untrackPid(pid: number): void;
}

interface Adopted {
  pgid: number;
  sid: number;
}

export class OrphanAdopter {
  readonly #native: NativePipe;
  readonly #groups: GroupRegistry;
  /** This process's own group, never killed or registered (a misfiled child of ours could be in it). */
  readonly #ownGroup: number;
  readonly #adopted = new Map<number, Adopted>();
  readonly #timer: NodeJS.Timeout;
  readonly #onChild = () => this.#scheduleSweep();
  #sweepScheduled = false;
  #closed = false;

  /**
   * Makes this process a child subreaper and starts adopting; null where that is impossible (no native
   * addon, not Linux, a kernel before 3.4: orphans then go to init as before) or while another adopter
   * of this process is open.
   */
  static start(groups: GroupRegistry): OrphanAdopter | null {
    const native = loadNativePipe();
    if (active !== null || native === null || !recordChildProcessSpawns()) return null;
    // Everything that is our child before we are a subreaper was spawned by us.
    for (const pid of childrenOf(process.pid)) ownChildren.add(pid);
    if (!native.setChildSubreaper()) return null;
    active = new OrphanAdopter(native, groups);
    return active;
  }

  private constructor(native: NativePipe, groups: GroupRegistry) {
    this.#native = native;
    this.#groups = groups;
    this.#ownGroup = procStat(process.pid)?.pgid ?? process.pid;
    process.on('SIGCHLD', this.#onChild);
    this.#timer = setInterval(() => this.sweep(), ADOPTION_SWEEP_MS);
    this.#timer.unref();
  }

  /** Pids adopted and not yet reaped. */
  get adopted(): number[] {
    return [...this.#adopted.keys()];
  }

  /** Finds new orphans (registering their groups) and reaps the adopted ones that have exited. */
  sweep(): void {
    const children = childrenOf(process.pid);
    const current = new Set(children);
    // An own child no longer listed was reaped by its owner; its pid may come back as an orphan's.
    for (const pid of ownChildren) if (!current.has(pid)) ownChildren.delete(pid);
    for (const pid of children) {
      if (ownChildren.has(pid) || this.#adopted.has(pid)) continue;
      const stat = procStat(pid);
      if (stat === null || stat.ppid !== process.pid) continue;
      this.#adopted.set(pid, { pgid: stat.pgid, sid: stat.sid });
      this.#groups.trackPid(pid);
      if (this.#registrable(stat.pgid)) this.#groups.track(stat.pgid);
    }
    for (const [pid, adopted] of this.#adopted) {
      if (this.#reap(pid)) {
        this.#adopted.delete(pid);
        this.#groups.untrackPid(pid);
        if (this.#registrable(adopted.pgid)) this.#groups.untrack(adopted.pgid);
      } else {
        this.#follow(pid, adopted);
      }
    }
  }

  /**
   * An orphan adopted before it called setsid (or setpgid) is in a new group by now: the watchdog must
   * kill that one. Its pid is registered too, so it dies with the owner even before a sweep notices.
   */
  #follow(pid: number, adopted: Adopted): void {
    const stat = procStat(pid);
    if (stat === null || stat.pgid === adopted.pgid) return;
    if (this.#registrable(adopted.pgid)) this.#groups.untrack(adopted.pgid);
    if (this.#registrable(stat.pgid)) this.#groups.track(stat.pgid);
    adopted.pgid = stat.pgid;
    adopted.sid = stat.sid;
  }

  /**
   * Kills the adopted orphans from session `sid` (a table child leads its own session: its pid): those
   * that left the child's group with setpgid. One that called setsid has a session of its own and is
   * killed at close.
   */
  killSession(sid: number): void {
    this.sweep();
    for (const [pid, adopted] of this.#adopted) if (adopted.sid === sid) this.#kill(pid, adopted);
  }

  /**
   * Stops adopting, kills every adopted orphan (and the groups they lead) and reaps them, again and again
   * as the killed ones' own children are orphaned in turn, until none is left or CLOSE_REAP_MS passed
   * (what is left is init's once this process exits). Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#timer);
    process.off('SIGCHLD', this.#onChild);
    if (active === this) active = null;
    const deadline = Date.now() + CLOSE_REAP_MS;
    for (;;) {
      this.sweep();
      if (this.#adopted.size === 0 || Date.now() >= deadline) break;
      for (const [pid, adopted] of this.#adopted) this.#kill(pid, adopted);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    // Off last: the killed orphans' children still came here. Nobody would reap later ones.
    this.#native.setChildSubreaper(false);
  }

  #scheduleSweep(): void {
    if (this.#sweepScheduled) return;
    this.#sweepScheduled = true;
    setImmediate(() => {
      this.#sweepScheduled = false;
      if (!this.#closed) this.sweep();
    });
  }

  /** True once `pid` is reaped (or is no child of ours any more). */
  #reap(pid: number): boolean {
    try {
      return this.#native.reapChild(pid);
    } catch {
      return true;
    }
  }

  /** SIGKILL to the orphan's group when it leads one (its children are in it), else to the orphan. */
  #kill(pid: number, adopted: Adopted): void {
    const target = adopted.pgid === pid && this.#registrable(pid) ? -pid : pid;
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      // Gone already: it is reaped at the next sweep.
    }
  }

  #registrable(pgid: number): boolean {
    return pgid > 1 && pgid !== this.#ownGroup;
  }
}
