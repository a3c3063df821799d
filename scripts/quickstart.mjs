#!/usr/bin/env node
// `npm run quickstart`: installs, builds and runs the local stack (scripts/stack.mjs, which takes the same
// flags). On a machine whose Node is below Tether's floor it runs all of that on the pinned Node 24, fetched
// from the npm registry (scripts/runtime.mjs), and says so. Before installing it checks what stack.mjs would
// refuse (a port in use, a stack already running from the data directory) and takes the data directory's lock,
// so that a second quickstart says so at once and touches nothing.
//
// Ctrl-C, SIGTERM or SIGHUP stop it at any point: during install and build they are passed on to pnpm, then
// stack.mjs stops the services. TETHER_QUICKSTART_SKIP_BUILD=1 skips install and build (for tests, which must not
// rebuild the checkout under other tests' feet, and for a restart of a built checkout).
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { endWithParent, ensureSupportedNode, root } from './runtime.mjs';
import { lockDataDir, parseStackArgs, preflight, USAGE } from './stack-preflight.mjs';

await ensureSupportedNode('npm run quickstart');
// biome-ignore lint/suspicious/noUndeclaredEnvVars: set by npm for the scripts it runs; these run outside turbo.
if (process.env.npm_lifecycle_event) endWithParent();

const options = parseStackArgs();
if (options.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
await preflight(options);
lockDataDir(options);

const SIGNALS = { SIGHUP: 1, SIGINT: 2, SIGTERM: 15 };

/** Runs `pnpm ARGS` (scripts/pnpm.mjs); a signal meanwhile is passed on, and ends this process once pnpm ends. */
function pnpm(args) {
  return new Promise((done) => {
    const child = spawn(process.execPath, [join(root, 'scripts', 'pnpm.mjs'), ...args], {
      stdio: 'inherit',
      cwd: root,
    });
    let signalled = null;
    const forward = (signal) => {
      signalled = signal;
      child.kill(signal);
    };
    for (const signal of Object.keys(SIGNALS)) process.on(signal, forward);
    const settle = (failure, code = 1) => {
      for (const signal of Object.keys(SIGNALS)) process.off(signal, forward);
      if (signalled) {
        process.stderr.write(`quickstart: stopped (${signalled}) during pnpm ${args.join(' ')}\n`);
        process.exit(128 + SIGNALS[signalled]);
      }
      if (failure) {
        process.stderr.write(`quickstart: pnpm ${args.join(' ')} failed (${failure})\n`);
        process.exit(code || 1);
      }
      done();
    };
    child.once('error', (err) => settle(err.message));
    child.once('exit', (code, signal) => settle(code === 0 ? null : `exit ${code ?? signal}`, code));
  });
}

// biome-ignore lint/suspicious/noUndeclaredEnvVars: read here only; these scripts run outside turbo.
if (process.env.TETHER_QUICKSTART_SKIP_BUILD !== '1') {
  await pnpm(['install']);
  await pnpm(['run', 'build']);
}
await import('./stack.mjs');
