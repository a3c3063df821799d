/** The harness bin run with its peak memory watched: what the copy tests bound. */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@tether/test-kit';

/** Peak resident set (VmHWM) of a live process, in MiB. */
export function peakRssMib(pid: number): number {
  try {
    const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

/** Runs the harness bin (stdout ignored); tracks its peak RSS while it runs. */
export function harnessWithPeakRss(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stderr: string; peakMib: number }> {
  const child = spawn(process.execPath, [join(repoRoot(), 'apps', 'harness', 'dist', 'main.js'), ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d;
  });
  let peakMib = 0;
  const sampler = setInterval(() => {
    peakMib = Math.max(peakMib, peakRssMib(child.pid!));
  }, 20);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => {
      clearInterval(sampler);
      resolve({ code, stderr, peakMib });
    });
  });
}
