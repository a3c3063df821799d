import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { procPids, statFields } from './processes.js';

/**
 * What a live process holds, read from Linux `/proc`, for leak checks and memory figures in black-box tests:
 * its descendants, its open file descriptors (sockets among them) and its resident set. A process that is
 * gone reads as holding nothing.
 */

/** `/proc/<pid>/status` field in kB (VmRSS, VmHWM, …); 0 if the process or the field is gone. */
function statusKib(pid: number, field: string): number {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) : 0;
  } catch {
    return 0;
  }
}

/** Peak resident set (VmHWM) in MiB. */
export function peakRssMib(pid: number): number {
  return statusKib(pid, 'VmHWM') / 1024;
}

/** Current resident set (VmRSS) in MiB. */
export function rssMib(pid: number): number {
  return statusKib(pid, 'VmRSS') / 1024;
}

/** Parent pid of every live, non-zombie process, read in one `/proc` scan. */
function parentMap(): Map<number, number[]> {
  const children = new Map<number, number[]>();
  for (const pid of procPids()) {
    const fields = statFields(pid);
    if (fields === null || fields[0] === 'Z' || fields[0] === 'X') continue;
    const ppid = Number(fields[1]);
    const list = children.get(ppid) ?? [];
    list.push(pid);
    children.set(ppid, list);
  }
  return children;
}

/** Live descendants of `pid` (children, grandchildren, …), not counting zombies. */
export function descendantPids(pid: number): number[] {
  const children = parentMap();
  const found: number[] = [];
  const queue = [pid];
  while (queue.length > 0) {
    const next = queue.shift() as number;
    for (const child of children.get(next) ?? []) {
      found.push(child);
      queue.push(child);
    }
  }
  return found;
}

/** Targets of the open descriptors of `pid` (`socket:[123]`, `pipe:[456]`, paths); [] if it is gone. */
export function openFds(pid: number | 'self'): string[] {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return [];
  }
  const targets: string[] = [];
  for (const fd of fds) {
    try {
      targets.push(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // closed while we were reading the directory
    }
  }
  return targets;
}

/** How many descriptors `pid` holds, and how many of them are sockets. */
export function fdCounts(pid: number | 'self'): { fds: number; sockets: number } {
  const targets = openFds(pid);
  return { fds: targets.length, sockets: targets.filter((t) => t.startsWith('socket:')).length };
}

export interface SocketPeer {
  inode: string;
  localPort: number;
  remotePort: number;
  /** Kernel TCP state: `01` established, `0A` listen, `06` time-wait, … */
  state: string;
}

/**
 * The TCP sockets among `pid`'s descriptors with their ports (from `/proc/<pid>/net/tcp{,6}`), so a leak
 * check can tell, say, an executor's idle keep-alive connections to its registry from anything else.
 * Non-TCP sockets (Unix, netlink) are left out.
 */
export function socketPeers(pid: number): SocketPeer[] {
  const byInode = new Map<string, SocketPeer>();
  for (const table of ['tcp', 'tcp6']) {
    let text = '';
    try {
      text = readFileSync(`/proc/${pid}/net/${table}`, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10) continue;
      const port = (address: string) => Number.parseInt(address.slice(address.lastIndexOf(':') + 1), 16);
      const inode = cols[9] as string;
      byInode.set(inode, {
        inode,
        localPort: port(cols[1] as string),
        remotePort: port(cols[2] as string),
        state: cols[3] as string,
      });
    }
  }
  const peers: SocketPeer[] = [];
  for (const target of openFds(pid)) {
    const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
    const peer = inode ? byInode.get(inode) : undefined;
    if (peer) peers.push(peer);
  }
  return peers;
}

/** CPU time (user + system) `pid` has used so far, in seconds; 0 if it is gone. */
export function cpuSeconds(pid: number | 'self'): number {
  const fields = statFields(pid);
  // utime and stime are fields 14 and 15 of stat(5), 11 and 12 after `pid (comm)`; USER_HZ is 100 on Linux.
  return fields === null ? 0 : (Number(fields[11]) + Number(fields[12])) / 100;
}
