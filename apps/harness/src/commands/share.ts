// `harness share ID`: the key that started a detached process lets another key follow it (`--read-only`) or
// control it too, by a one-time token (`harness attach --token TOKEN ID`), until it expires or is revoked.

import { durationArg } from '@tether/telemetry/cli';
import type { Command } from 'commander';
import {
  type CliIo,
  connectOptions,
  flushOutput,
  printable,
  type SetExit,
  withEnvironment,
  writeOutput,
} from '../common.js';
import type { ConnectFlags } from '../target.js';

/** `--ttl`: a duration (a bare number is seconds), at most a week (the executor's bound). */
const ttlArg = durationArg({ bare: 's', max: 7 * 24 * 3600_000 });

interface ShareFlags {
  readOnly: boolean;
  ttl?: number;
  revoke: boolean;
}

export function registerShare(program: Command, io: CliIo, setExit: SetExit): void {
  connectOptions(
    program
      .command('share')
      .description('let another API key follow (--read-only) or also control a detached process of yours, by a token')
      .argument('<id>', 'process id (as harness exec -d printed it)')
      .argument(
        '[share]',
        'with --revoke: the share to revoke (its id from harness ps); default every share of the process',
      )
      .option('-r, --read-only', 'the other side sees the output only; what it types reaches nothing', false)
      .option('--ttl <duration>', 'how long the token lets in (1h by default, at most 7d; 90s, 30m, 12h…)', ttlArg)
      .option(
        '--revoke',
        'end the share (every share of the process without SHARE): whoever came in by it stops at once',
        false,
      ),
  )
    .addHelpText(
      'after',
      `
Prints the token once, on stdout, and on stderr the command to give with it:
  harness attach --token TOKEN ID
The token is a secret: whoever has it (and may connect to the environment) follows the process as the share
says until it expires or is revoked. harness ps lists each process's shares (id, access, expiry, attached).
Exit status: 0; 1 for an unknown id or an executor without shared processes; 2 for bad usage; 255 when the
environment could not be reached.`,
    )
    .action(async (id: string, shareId: string | undefined, options: ConnectFlags & ShareFlags) => {
      setExit(
        await withEnvironment(io, options, undefined, async (env) => {
          if (options.revoke) {
            const revoked = await env.unshare(id, shareId);
            io.stderr.write(`harness: ${revoked} share${revoked === 1 ? '' : 's'} of ${printable(id)} revoked\n`);
            return revoked > 0 || shareId === undefined ? 0 : 1;
          }
          const share = await env.share(id, {
            access: options.readOnly ? 'view' : 'control',
            ...(options.ttl === undefined ? {} : { ttlSec: Math.max(1, Math.round(options.ttl / 1000)) }),
          });
          await writeOutput(io, io.stdout, `${share.token}\n`);
          await flushOutput(io);
          const until = new Date(share.expiresAtMs).toISOString().replace(/\.\d{3}Z$/, 'Z');
          io.stderr.write(
            `harness: share ${share.shareId} of ${printable(id)} (${options.readOnly ? 'read-only' : 'control'}) until ${until}: harness attach --token TOKEN ${printable(id)}\n`,
          );
          return 0;
        }),
      );
    });
}
