#!/usr/bin/env node
import { stdinSource } from './commands/stdin.js';
import { enableCompileCache } from './compile-cache.js';

// Before the CLI's code loads: import() keeps it out of this file, so it is compiled with the cache on.
enableCompileCache();
const { run } = await import('./cli.js');

process.exitCode = await run(process.argv.slice(2), {
  stdin: stdinSource(),
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
});
