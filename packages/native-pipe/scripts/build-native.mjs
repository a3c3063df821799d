#!/usr/bin/env node
/**
 * Compiles native/tether_pipe.node with node-gyp against the running Node's headers: `npm_config_nodedir`,
 * else the headers installed beside node (include/node), else node-gyp downloads them. Without a compiler
 * or headers the build is skipped with a warning: `loadNativePipe()` then returns null and pipe children
 * get libuv's socketpairs for stdio, on which `/dev/stdout` and `/dev/stderr` cannot be opened.
 * TETHER_NATIVE_PIPE=require makes a failed build fail the script (CI). An argument names another package
 * directory holding a native/ to build (the tests build a copy).
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const here = process.argv[2] ?? new URL('..', import.meta.url).pathname;
const nodeGyp = createRequire(import.meta.url).resolve('node-gyp/bin/node-gyp.js');
// Node's own headers when it was installed with them (Debian's nodejs, the official tarballs): no download.
const prefix = dirname(dirname(process.execPath));
const nodedir =
  process.env.npm_config_nodedir ?? (existsSync(join(prefix, 'include', 'node', 'node_api.h')) ? prefix : undefined);
const args = [nodeGyp, 'rebuild', '--directory', 'native', '--loglevel', 'warn'];
if (nodedir) args.push(`--nodedir=${nodedir}`);
const result = spawnSync(process.execPath, args, { cwd: here, stdio: 'inherit' });
if (result.status !== 0) {
  const message = `@tether/native-pipe: the pipe addon was not built (node-gyp exited ${result.status ?? result.signal}); child stdio will be socketpairs`;
  if (process.env.TETHER_NATIVE_PIPE === 'require') {
    console.error(message);
    process.exit(1);
  }
  console.warn(`warning: ${message}`);
}
