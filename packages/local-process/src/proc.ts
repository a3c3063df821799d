/**
 * What Linux's /proc says about processes, for finding descendants that left their process group (setsid,
 * setpgid) and so escape a group kill. Elsewhere (no /proc) every function finds nothing.
 *
 * Children come from `/proc/<pid>/task/<tid>/children` (one small read per thread), else, on kernels built
 * without CONFIG_PROC_CHILDREN, from one scan of every `/proc/<pid>/stat`.
 */
import { readdirSync, readFileSync } from 'node:fs';

export interface ProcStat {
  /** One letter: R, S, D, Z (zombie), T (stopped), X… */
  state: string;
  ppid: number;
  pgid: number;
  sid: number;
}

/** The fields of `/proc/<pid>/stat` we use; null when the process is gone (or there is no /proc). */
export function procStat(pid: number): ProcStat | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may hold anything, spaces and ')' included.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const [state, ppid, pgid, sid] = [fields[0], Number(fields[1]), Number(fields[2]), Number(fields[3])];
  if (state === undefined || !Number.isSafeInteger(ppid) || !Number.isSafeInteger(pgid)) return null;
  return { state, ppid, pgid, sid };
}

let childrenFiles: boolean | undefined;

/** Whether this kernel has `/proc/<pid>/task/<tid>/children` (checked once, on this process). */
function hasChildrenFiles(): boolean {
  if (childrenFiles === undefined) {
    try {
      readFileSync(`/proc/${process.pid}/task/${process.pid}/children`);
      childrenFiles = true;
    } catch {
      childrenFiles = false;
    }
  }
  return childrenFiles;
}

/** The pids whose parent is `pid` (any thread of it). */
export function childrenOf(pid: number): number[] {
  return childrenLookup()(pid);
}

/**
 * A function from pid to its children: the children files, read per call; without them, one scan of
 * /proc made now and used for every call (so a walk over a tree costs one scan, not one per node).
 */
function childrenLookup(): (pid: number) => number[] {
  if (!hasChildrenFiles()) {
    const parents = scanParents();
    return (pid) => parents.get(pid) ?? [];
  }
  return readChildren;
}

function readChildren(pid: number): number[] {
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  const children: number[] = [];
  for (const tid of tasks) {
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8');
    } catch {
      continue;
    }
    for (const word of text.split(' ')) if (word !== '') children.push(Number(word));
  }
  return children;
}

/** parent pid → its children, from every /proc/<pid>/stat (the fallback: one read per process). */
function scanParents(): Map<number, number[]> {
  const parents = new Map<number, number[]>();
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return parents;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = procStat(Number(entry));
    if (stat === null) continue;
    const siblings = parents.get(stat.ppid);
    if (siblings === undefined) parents.set(stat.ppid, [Number(entry)]);
    else siblings.push(Number(entry));
  }
  return parents;
}

/**
 * Every descendant of `pid` still linked to it by parents (breadth first), at most `limit` of them: a
 * descendant whose parent died was reparented away (to init or a subreaper) and is not found here.
 */
export function descendantsOf(pid: number, limit: number): number[] {
  const children = childrenLookup();
  const found: number[] = [];
  const seen = new Set<number>([pid]);
  const queue = [pid];
  while (queue.length > 0 && found.length < limit) {
    for (const child of children(queue.shift()!)) {
      if (seen.has(child) || found.length >= limit) continue;
      seen.add(child);
      found.push(child);
      queue.push(child);
    }
  }
  return found;
}
