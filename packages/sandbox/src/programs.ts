import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Where a program is looked for after PATH: the usual bin directories, and the sbin ones for admin tools. */
export const BIN_DIRS = ['/usr/bin', '/bin'];
export const SBIN_DIRS = ['/usr/sbin', '/sbin', ...BIN_DIRS];

/** The first executable `name` on PATH, then in `fallback`; null when none is. */
export function findProgram(name: string, fallback: string[] = BIN_DIRS, path = process.env.PATH ?? ''): string | null {
  for (const dir of [...path.split(delimiter).filter(Boolean), ...fallback]) {
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {}
  }
  return null;
}
