// `harness recording verify FILE` and `harness recording play FILE`: the recordings an executor run with
// `--record-dir` leaves (asciicast v2, hash-chained and sealed with its recording key). Both read the file on
// this machine; nothing connects.

import type { KeyObject } from 'node:crypto';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { TetherError } from '@tether/client';
import { playRecording, publicKeyOf, verifyRecording } from '@tether/recording';
import { type Command, InvalidArgumentError } from 'commander';
import { type CliIo, flushOutput, printable, report, type SetExit, writeOutput } from '../common.js';

/** The largest recording read (a part is 256 MiB at most by the executor's default). */
const MAX_RECORDING_BYTES = 1024 * 1024 * 1024;

export function registerRecording(program: Command, io: CliIo, setExit: SetExit): void {
  const recording = program
    .command('recording')
    .description('check or replay a session recording an executor made (executor --record-dir)');
  recording
    .command('verify')
    .description('check that a recording is whole and signed by the executor’s recording key')
    .argument('<file>', 'a .cast file')
    .option(
      '--key <key>',
      'the recording key to trust: ed25519:BASE64 as the executor printed it, or a file holding it (default: recording-key.pub beside the file, else the key the file names, which proves less)',
    )
    .addHelpText(
      'after',
      `
Exit status: 0 when every event is as recorded and sealed by the key; 1 naming the first line (and event)
that is not, or an unfinished recording (events after its last seal); 2 for bad usage.`,
    )
    .action((file: string, options: { key?: string }) => {
      try {
        setExit(verify(io, file, options.key));
      } catch (err) {
        setExit(report(io, err));
      }
    });
  recording
    .command('play')
    .description('replay a recording’s output in this terminal with its timing')
    .argument('<file>', 'a .cast file')
    .option('--speed <n>', 'play n times as fast (default 1)', speed, 1)
    .option('--max-wait <seconds>', 'shorten longer pauses to this (default 2)', seconds, 2)
    .action(async (file: string, options: { speed: number; maxWait: number }) => {
      const abort = new AbortController();
      const stop = () => abort.abort();
      process.on('SIGINT', stop);
      try {
        await playRecording(readRecording(file), {
          speed: options.speed,
          maxWaitMs: options.maxWait * 1000,
          signal: abort.signal,
          write: (text) => writeOutput(io, io.stdout, text),
        });
        await flushOutput(io);
        setExit(abort.signal.aborted ? 130 : 0);
      } catch (err) {
        setExit(report(io, err));
      } finally {
        process.off('SIGINT', stop);
      }
    });
}

function verify(io: CliIo, file: string, keyOption: string | undefined): number {
  const text = readRecording(file);
  const { key, from } = trustedKey(file, keyOption);
  const result = verifyRecording(text, key ? { key } : {});
  const name = printable(file);
  if (!result.ok) {
    const problem = result.problem!;
    io.stderr.write(
      `harness: ${name}: line ${problem.line}${problem.event ? ` (event ${problem.event})` : ''}: ${problem.reason}\n`,
    );
    return 1;
  }
  const trust = from ?? 'the key the file names (not checked against a published key: pass --key)';
  io.stdout.write(
    `${name}: intact: ${result.events} events, ${result.seals} seals, signed by ${result.key} (${trust})\n`,
  );
  return 0;
}

/** The key to trust and where it came from, or none (the file's own is then used). */
function trustedKey(file: string, option: string | undefined): { key: KeyObject | null; from: string | null } {
  if (option !== undefined) {
    const text = option.startsWith('ed25519:') ? option : readKeyFile(option);
    return { key: parseKey(text, '--key'), from: '--key' };
  }
  const beside = join(dirname(file), 'recording-key.pub');
  if (existsSync(beside)) return { key: parseKey(readKeyFile(beside), beside), from: beside };
  return { key: null, from: null };
}

function readKeyFile(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new TetherError(
      'invalid_argument',
      `--key ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
}

function parseKey(text: string, where: string): KeyObject {
  try {
    return publicKeyOf(text);
  } catch (err) {
    throw new TetherError('invalid_argument', `${where}: ${(err as Error).message}`);
  }
}

function readRecording(file: string): string {
  let size: number;
  try {
    size = statSync(file).size;
  } catch (err) {
    throw new TetherError(
      'invalid_argument',
      `${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`,
    );
  }
  if (size > MAX_RECORDING_BYTES) throw new TetherError('invalid_argument', `${file}: larger than 1 GiB`);
  return readFileSync(file, 'utf8');
}

function speed(value: string): number {
  const parsed = Number(value);
  if (!(parsed > 0) || !Number.isFinite(parsed)) throw new InvalidArgumentError('expected a positive number');
  return parsed;
}

function seconds(value: string): number {
  const parsed = Number(value);
  if (!(parsed >= 0) || !Number.isFinite(parsed)) throw new InvalidArgumentError('expected a number of seconds');
  return parsed;
}
