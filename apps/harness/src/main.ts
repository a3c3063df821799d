#!/usr/bin/env node
import { join } from 'node:path';
import { loadBundle } from './bundle-runner.js';
import type * as Cli from './cli.js';

/** The CLI bundle's file name beside this file (scripts/bundle.mjs writes it in). */
declare const __CLI_BUNDLE__: string;

// The native packages stay outside the bundle (their addons sit beside them). Node's compile cache is not turned
// on: for this file and theirs it cost about as much as it saved (farm-bench, 40 pairs).
const [nativeCrypto, nativePipe] = await Promise.all([import('@tether/native-crypto'), import('@tether/native-pipe')]);
const args = process.argv.slice(2);
const cli = loadBundle<typeof Cli>(join(import.meta.dirname, __CLI_BUNDLE__), args[0] ?? '', {
  '@tether/native-crypto': nativeCrypto,
  '@tether/native-pipe': nativePipe,
});
const code = await cli.exports.run(args, {
  stdin: cli.exports.stdinSource(),
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
});
// A run cut short by bad usage or an unreachable environment called little of what the command calls.
if (code !== 2 && code !== 255) cli.save();
process.exitCode = code;
