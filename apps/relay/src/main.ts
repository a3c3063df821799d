#!/usr/bin/env node
import { buildCli } from './cli.js';

const stopSignal = new Promise<NodeJS.Signals>((resolve) => {
  process.once('SIGTERM', resolve);
  process.once('SIGINT', resolve);
});
const io = { stdout: process.stdout, stderr: process.stderr, env: process.env, stopSignal };

try {
  await buildCli(io, (code) => {
    process.exitCode = code;
  }).parseAsync(process.argv);
} catch (err) {
  process.stderr.write(`relay: ${(err as Error).message}\n`);
  process.exitCode = 1;
}
// Nothing else keeps the process alive once the relay is closed; exit promptly either way.
process.exit();
