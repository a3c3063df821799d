#!/usr/bin/env node
// Thin launcher so the bin exists before the first build; the CLI itself is dist/main.js.
import module from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';

// Node 22.1+ keeps V8's compiled code of the bundle on disk, so a command after the first skips most of
// the compile (the harness's start is mostly Node's). The cache lives in the user's own cache directory,
// never a shared temp one; NODE_DISABLE_COMPILE_CACHE=1 turns it off. A failure only costs the speed-up.
if (typeof module.enableCompileCache === 'function') {
  try {
    const base = process.env.XDG_CACHE_HOME || join(homedir(), '.cache');
    module.enableCompileCache(join(base, 'tether', 'compile-cache'));
  } catch {}
}
await import('../dist/main.js');
