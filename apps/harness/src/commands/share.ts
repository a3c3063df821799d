// `harness share ID`: the key that started a detached process lets another key follow it (`--read-only`) or
// control it too, by a token (`harness attach --token TOKEN ID`), and lets a browser in by a one-time link (the
// page watches it live, with its participants, and takes control where the share allows), until the share
// expires or is revoked.

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
import { type ConnectFlags, resolveRegistryAccess, throughRegistry } from '../target.js';
import { clock, mintBrowserGrant } from './login.js';

/** The registry's bound on a browser grant's life (seconds): a share link must be opened within it. */
const MAX_LINK_TTL_SEC = 900;

/** `--ttl`: a duration (a bare number is seconds), at most a week (the executor's bound). */
const ttlArg = durationArg({ bare: 's', max: 7 * 24 * 3600_000 });

interface ShareFlags {
  readOnly: boolean;
  ttl?: number;
  revoke: boolean;
  /** `--no-link`: the token only. */
  link: boolean;
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
      )
      .option('--no-link', 'print the token only, no browser link'),
  )
    .addHelpText(
      'after',
      `
Prints on stdout the token (line 1) and, through a registry, a one-time browser link (line 2); on stderr what
to do with them:
  harness attach --token TOKEN ID          (another API key of the environment)
  open the link in a browser               (no key needed: the link signs the page in)
The token is a secret: whoever has it (and may connect to the environment) follows the process as the share
says until it expires or is revoked. The link opens the browser page once, within 15 minutes (or --ttl if
shorter): the page watches the process live, lists who follows it and, unless --read-only, has "take control".
Its session reaches that process only, and only while the share lives. harness ps lists each process's shares
(id, access, expiry, attached); --revoke ends one at once, for the page too.
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
          // The link's grant first (an unused one reaches nothing, and expires). Where the registry makes none, the
          // token alone is printed and stderr says why.
          const ttlSec = options.ttl === undefined ? undefined : Math.max(1, Math.round(options.ttl / 1000));
          let grant: { url: string; expiresAt: number } | null = null;
          let noLink = options.link ? 'the executor is reached directly (--url), not through a registry' : null;
          if (options.link && throughRegistry(options, io.env)) {
            try {
              grant = await mintBrowserGrant(resolveRegistryAccess(options, io.env), {
                ttlSeconds: Math.min(MAX_LINK_TTL_SEC, ttlSec ?? MAX_LINK_TTL_SEC),
                shareAccess: options.readOnly ? 'view' : 'control',
              });
            } catch (err) {
              // The token still works (an admin key, say, may share but mints no browser grants).
              noLink = (err as Error).message;
            }
          }
          const share = await env.share(id, {
            access: options.readOnly ? 'view' : 'control',
            ...(ttlSec === undefined ? {} : { ttlSec }),
          });
          // The process id and the token ride in the #fragment, which browsers never send to a server.
          const link =
            grant === null ? null : `${grant.url}&${new URLSearchParams({ process: id, share: share.token })}`;
          await writeOutput(io, io.stdout, `${share.token}\n${link === null ? '' : `${link}\n`}`);
          await flushOutput(io);
          const until = new Date(share.expiresAtMs).toISOString().replace(/\.\d{3}Z$/, 'Z');
          const linkNote =
            grant !== null
              ? `; the link opens the browser page once, until ${clock(grant.expiresAt)}`
              : noLink !== null
                ? `; no browser link: ${noLink}`
                : '';
          io.stderr.write(
            `harness: share ${share.shareId} of ${printable(id)} (${options.readOnly ? 'read-only' : 'control'}) until ${until}: harness attach --token TOKEN ${printable(id)}${linkNote}\n`,
          );
          return 0;
        }),
      );
    });
}
