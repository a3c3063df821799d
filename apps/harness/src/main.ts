#!/usr/bin/env node
import { join } from 'node:path';
import type * as Cli from './cli.js';
import {
  acceptInWorker,
  runtimeIdentity,
  runWarm,
  serveWarm,
  WARM_ACCEPT_ARG,
  WARM_ARG,
  WARM_COMMAND,
} from './warm.js';

/** The CLI bundle's file name beside this file (scripts/bundle.mjs writes it in). */
declare const __CLI_BUNDLE__: string;

// The native packages stay outside the bundle (their addons sit beside them). Node's compile cache is not turned
// on: for this file and theirs it cost about as much as it saved (farm-bench, 40 pairs).
const nativePipe = await import('@tether/native-pipe');
const native = nativePipe.loadNativePipe();
const runtime = (env: NodeJS.ProcessEnv) => runtimeIdentity(__CLI_BUNDLE__, import.meta.url, env);
const bundle = join(import.meta.dirname, __CLI_BUNDLE__);
// Loaded when this process runs the command itself: a command a warm process runs never evaluates it (node:vm,
// node:zlib and the cache's file checks cost about 5 ms).
const load = async (command: string) => {
  const [nativeCrypto, { loadBundle }] = await Promise.all([
    import('@tether/native-crypto'),
    import('./bundle-runner.js'),
  ]);
  return loadBundle<typeof Cli>(bundle, command, {
    '@tether/native-crypto': nativeCrypto,
    '@tether/native-pipe': nativePipe,
  });
};

let args = process.argv.slice(2);
if (args[0] === WARM_ACCEPT_ARG && native !== null) {
  // A warm process's accepting thread (src/warm.ts): nothing else runs here.
  acceptInWorker(native);
} else {
  await runCommand();
}

async function runCommand(): Promise<void> {
  let cacheCommand = args[0] ?? '';
  let cli: Awaited<ReturnType<typeof load>>;
  let ready: ReturnType<typeof cli.exports.holdChannel> = null;
  if (args[0] === WARM_ARG && args.length === 1 && native !== null) {
    // A master's warm process: the bundle loaded and a channel set up ahead, then a command's whole run
    // (src/warm.ts).
    const loaded = await load(WARM_COMMAND);
    ({
      args,
      loaded: cli,
      ready,
    } = await serveWarm(native, runtime, loaded, new URL(import.meta.url), (spec, tell) =>
      loaded.exports.holdChannel(spec, (line) => process.stderr.write(`${line}\n`), tell),
    ));
    cacheCommand = WARM_COMMAND;
  } else {
    const status = await runWarm(args, native, () => runtime(process.env));
    // A command a warm process ran left nothing for this process to write: it ends without Node's teardown.
    if (status !== null) native?.exitNow(status);
    cli = await load(cacheCommand);
  }
  const code = await cli.exports.run(args, {
    stdin: cli.exports.stdinSource(),
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    ...(ready ? { readyChannel: ready } : {}),
  });
  // A command that connected nowhere (or elsewhere) leaves the channel unused: it must not hold the process.
  ready?.close();
  // A run cut short by bad usage or an unreachable environment called little of what the command calls (and a
  // warm process's cache is the one of WARM_COMMAND).
  if (code !== 2 && code !== 255 && args[0] === cacheCommand) cli.save();
  process.exitCode = code;
}
