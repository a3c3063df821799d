import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { PEER_MARKER_ENV, peerMarker } from './peer.js';

/** Whether a pid still exists: running, or ended and not yet reaped by its parent (a zombie answers signal 0). */
export function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Whether a pid refers to a live (non-zombie) process. */
export function isAlive(pid: number): boolean {
  if (!pidExists(pid)) return false;
  const state = statFields(pid)?.[0];
  if (state === undefined) return !existsProc();
  return state !== 'Z' && state !== 'X';
}

/** The pids `/proc` lists now; none without `/proc`. */
export function procPids(): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  return entries.filter((entry) => /^\d+$/.test(entry)).map(Number);
}

/**
 * The fields of `/proc/<pid>/stat` after `pid (comm)`, the state first (stat(5)'s field 3 is [0]); null once
 * the process is gone. comm may contain spaces and parentheses, so the fields start after the last ')'.
 */
export function statFields(pid: number | 'self'): string[] | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

function existsProc(): boolean {
  try {
    readdirSync('/proc');
    return true;
  } catch {
    return false;
  }
}

export interface ProcessInfo {
  pid: number;
  cmdline: string;
  cwd: string | undefined;
}

export interface FindProcessesOptions {
  /** Processes whose cwd is this directory or below it. */
  cwdUnder?: string;
  /** Peers launched by the test-kit with this marker (see `peerMarker()`); omit to skip the peer scan. */
  peerMarker?: string;
  /** Processes whose command line contains any of these strings. */
  commandIncludes?: string[];
  /** Processes whose environment holds any of these exact `NAME=value` entries. */
  environIncludes?: string[];
}

function procInfo(pid: number): ProcessInfo | undefined {
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
    let cwd: string | undefined;
    try {
      cwd = readlinkSync(`/proc/${pid}/cwd`);
    } catch {
      cwd = undefined;
    }
    return { pid, cmdline, cwd };
  } catch {
    return undefined;
  }
}

/**
 * Live processes (Linux `/proc` scan) that either run with a cwd under `cwdUnder` (the children
 * that tests start) or carry the test-kit peer marker `peerMarker` in their environment (peers).
 */
export function findProcesses(options: FindProcessesOptions): ProcessInfo[] {
  const found: ProcessInfo[] = [];
  const marker = `${PEER_MARKER_ENV}=${options.peerMarker ?? peerMarker()}`;
  for (const pid of procPids()) {
    if (pid === process.pid || !isAlive(pid)) continue;
    const info = procInfo(pid);
    if (!info) continue;
    let match = false;
    if (
      options.cwdUnder &&
      info.cwd &&
      (info.cwd === options.cwdUnder || info.cwd.startsWith(`${options.cwdUnder}/`))
    ) {
      match = true;
    }
    if (!match && options.commandIncludes?.some((text) => info.cmdline.includes(text))) match = true;
    if (!match && (options.peerMarker !== undefined || options.environIncludes?.length)) {
      try {
        const environ = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
        match =
          (options.peerMarker !== undefined && environ.includes(marker)) ||
          (options.environIncludes?.some((entry) => environ.includes(entry)) ?? false);
      } catch {
        match = false;
      }
    }
    if (match) found.push(info);
  }
  return found;
}
