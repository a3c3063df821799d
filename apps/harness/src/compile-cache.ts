import module from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';

/**
 * Node 22.1+ keeps V8's compiled code on disk (`module.enableCompileCache`), so a command after the first skips
 * most of the compile of the CLI (on Node 24 here, `harness --version` went from 116 to 100 ms). It must be on
 * before the CLI's code loads, so main.ts turns it on and then imports the CLI. The cache lives in the user's
 * own cache directory (`$XDG_CACHE_HOME/tether/compile-cache`, else `~/.cache/…`), never a shared temp one;
 * NODE_DISABLE_COMPILE_CACHE=1 turns it off (Node's own switch). A failure only costs the speed-up.
 */
export function enableCompileCache(env: NodeJS.ProcessEnv = process.env): void {
  const enable = (module as { enableCompileCache?: (directory?: string) => unknown }).enableCompileCache;
  if (typeof enable !== 'function') return;
  try {
    const base = env.XDG_CACHE_HOME || join(homedir(), '.cache');
    enable(join(base, 'tether', 'compile-cache'));
  } catch {
    // No cache: the CLI still runs, as fast as before.
  }
}
