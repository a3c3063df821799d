#!/usr/bin/env node
import { buildCommand, runExecutor } from './cli.js';

const io = { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr, env: process.env };

const command = buildCommand(async (options) => {
  process.exitCode = await runExecutor(options, io);
});
command.configureOutput({ writeErr: (text) => process.stderr.write(text) });

try {
  await command.parseAsync(process.argv);
} catch (err) {
  process.stderr.write(`executor: ${(err as Error).stack ?? String(err)}\n`);
  process.exitCode = 1;
}
