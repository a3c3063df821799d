/**
 * Adopting orphans: a descendant that leaves its process group (setsid, setpgid) escapes every group kill,
 * and once its parent exits it is reparented to init, out of reach. As a child subreaper (Linux
 * PR_SET_CHILD_SUBREAPER, through @tether/native-pipe) this process gets such orphans as children instead.
 * Node reaps only the children it spawned, so the adopted ones are found here, reaped when they exit (no
 * zombies pile up), registered with the watchdog (the owner's death kills them, however it dies), and
 * killed when the owner closes its reaper or tears down the process whose session they are in.
 *
 * Finding them: every child of this process that it did not spawn itself is adopted. "Spawned itself"
 * means noted in the adopter's ledger by whoever spawned it (`markOwnChild`: the process table's children,
 * pipes or PTY, and the executor's sandboxed fs helpers, each given the adopter by the one who made it), or
 * before adoption started (a subreaper adopts nothing before it is one). Nothing is patched: a child made
 * any other way would be taken for an orphan, killed at close and reaped behind its owner's back, so only
 * the executor, which hands the adopter to everything of it that spawns, turns adoption on.
 *
 * Cost: a sweep reads this process's children (one small /proc file per thread) and does one
 * `waitpid(WNOHANG)` per adopted orphan; it runs on SIGCHLD (coalesced), every ADOPTION_SWEEP_MS while
 * adoption is on, and at teardown.
 */
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

/** At most one adopter per process: two would each take the other's orphans for theirs. */
let active: OrphanAdopter | null = null;

/**
 * Where a spawner notes the children it made, so that adoption never takes one for an orphan: given by
 * whoever owns the adopter (the executor's server) to what spawns (process tables, the fs helpers).
 */
export interface ChildLedger {
  /** `pid` is a child this process spawned; its own handle (libuv, node-pty) reaps it. */
  markOwnChild(pid: number): void;
  /** The child was reaped by its owner. */
  forgetOwnChild(pid: number): void;
}

/** Notes `child` in `ledger` (if any) until it exits: for a child_process child. */
export function noteChildProcess(
  ledger: ChildLedger | null | undefined,
  child: { pid?: number | undefined; once(event: 'exit', listener: () => void): unknown },
): void {
  const pid = child.pid;
  if (!ledger || pid === undefined) return;
  ledger.markOwnChild(pid);
  child.once('exit', () => ledger.forgetOwnChild(pid));
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

export class OrphanAdopter implements ChildLedger {
  readonly #native: NativePipe;
  /** Children this process spawned itself (noted by their spawners); their own handles reap them. */
  readonly #ownChildren = new Set<number>();
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
    if (active !== null || native === null) return null;
    // Everything that is our child before we are a subreaper was spawned by us.
    const before = childrenOf(process.pid);
    if (!native.setChildSubreaper()) return null;
    active = new OrphanAdopter(native, groups);
    for (const pid of before) active.markOwnChild(pid);
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

  markOwnChild(pid: number): void {
    this.#ownChildren.add(pid);
  }

  forgetOwnChild(pid: number): void {
    this.#ownChildren.delete(pid);
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
    for (const pid of this.#ownChildren) if (!current.has(pid)) this.#ownChildren.delete(pid);
    for (const pid of children) {
      if (this.#ownChildren.has(pid) || this.#adopted.has(pid)) continue;
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
