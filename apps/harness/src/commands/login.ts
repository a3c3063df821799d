import { checkEnvironmentId, checkRegistryUrl, TetherError } from '@tether/client';
import { durationArg, formatDuration } from '@tether/telemetry/cli';
import { type Command, Option } from 'commander';
import { type CliIo, EXIT, registryOptions, report, type SetExit } from '../common.js';
import { type ConnectFlags, type RegistryAccess, resolveRegistryAccess } from '../target.js';

/** The registry's bounds for a browser grant's lifetime (seconds): default 300, at most 900. */
const MAX_GRANT_TTL = 900;

interface LoginFlags extends ConnectFlags {
  web?: boolean;
  ttl?: number;
}

const ttl = durationArg({ bare: 's', min: 1000, max: MAX_GRANT_TTL * 1000, wholeSeconds: true });

/** `--ttl`: whole seconds from 1 to 900, as a duration (a bare number is seconds). */
function grantTtl(value: string): number {
  return ttl(value) / 1000;
}

/** `harness login --web`: a one-time link that opens the browser terminal on one environment. */
export function registerLogin(program: Command, io: CliIo, setExit: SetExit): void {
  const login = program
    .command('login')
    .description('print a one-time link that opens the browser terminal on an environment (--web)')
    .argument('[environment]', 'environment id (default: --environment-id or its variable)')
    .addOption(new Option('--web', 'mint a browser grant and print its /ui link (required for now)'))
    .addOption(
      new Option(
        '--ttl <duration>',
        `how long the link may be opened (90s, 5m; a bare number is seconds; at most ${formatDuration(MAX_GRANT_TTL * 1000)}) (default 5m)`,
      ).argParser(grantTtl),
    );
  for (const option of registryOptions()) login.addOption(option);
  login
    .addHelpText(
      'after',
      `
The registry (POST /cloud/browser-grants, with the same registry, API key and environment as harness
exec) mints a grant for this one environment; the link carries it in its #fragment, which browsers never
send to a server. The page exchanges it once for a session that may connect to this environment only, for
the registry's --browser-session-ttl (default 1 h); revoking the API key ends it. Treat the link as a
password until it is used or expires.
Prints the link on stdout (one line); on a terminal, a hint on stderr.
Exit status: 0; 2 for bad usage; 255 when the registry cannot be reached or refuses the key.

Example:
  harness login --web --environment-id dev-1 --ttl 2m`,
    )
    .action(async (environment: string | undefined, options: LoginFlags) => {
      setExit(await loginCommand(io, environment, options));
    });
}

async function loginCommand(io: CliIo, environment: string | undefined, options: LoginFlags): Promise<number> {
  if (!options.web) {
    io.stderr.write('harness: login needs --web (the only kind of login for now: a one-time browser link)\n');
    return EXIT.usage;
  }
  try {
    const access = resolveRegistryAccess(options, io.env, environment);
    const grant = await mintBrowserGrant(access, options.ttl === undefined ? {} : { ttlSeconds: options.ttl });
    io.stdout.write(`${grant.url}\n`);
    if (io.stderr.isTTY) {
      io.stderr.write(`harness: open this link in a browser; it works once and expires at ${clock(grant.expiresAt)}\n`);
    }
    return 0;
  } catch (err) {
    return report(io, err);
  }
}

/** HH:MM of a Unix time in seconds, local time (when a link expires). */
export function clock(unixSeconds: number): string {
  const at = new Date(unixSeconds * 1000);
  return `${String(at.getHours()).padStart(2, '0')}:${String(at.getMinutes()).padStart(2, '0')}`;
}

/**
 * A one-time browser grant for `access`'s environment (`POST /cloud/browser-grants`), its /ui link and its expiry
 * (Unix seconds). `shareAccess`: a share link's grant, whose session may reach only processes shared with it.
 */
export async function mintBrowserGrant(
  access: RegistryAccess,
  options: { ttlSeconds?: number; shareAccess?: 'view' | 'control' },
): Promise<{ url: string; expiresAt: number }> {
  checkEnvironmentId(access.environmentId);
  const base = checkRegistryUrl(access.registryUrl, access.allowInsecureRegistry);
  let response: Response;
  try {
    response = await fetch(`${base}/cloud/browser-grants`, {
      method: 'POST',
      redirect: 'manual',
      headers: { authorization: `Bearer ${access.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        environment_id: access.environmentId,
        ...(options.ttlSeconds === undefined ? {} : { ttl_seconds: options.ttlSeconds }),
        ...(options.shareAccess === undefined ? {} : { share_access: options.shareAccess }),
      }),
      signal: AbortSignal.timeout(15_000),
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
    throw new TetherError('registry', `cannot reach the registry at ${base}: ${cause}`);
  }
  const text = await response.text();
  let body: { url?: unknown; expires_at?: unknown; error?: { code?: unknown; message?: unknown } } = {};
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    // Described by the status below.
  }
  if (response.status === 201 && typeof body.url === 'string' && typeof body.expires_at === 'number') {
    return { url: body.url, expiresAt: body.expires_at };
  }
  const detail =
    typeof body.error?.code === 'string' ? ` [${body.error.code}]: ${String(body.error.message).slice(0, 300)}` : '';
  if (response.status === 403 && body.error?.code === 'forbidden_environment') {
    throw new TetherError(
      'unauthorized',
      `environment ${JSON.stringify(access.environmentId)} is not one this API key may use (the registry answered HTTP 403 forbidden_environment); check the environment id, or use a key for it`,
      { status: response.status },
    );
  }
  const refused = response.status === 401 || response.status === 403;
  throw new TetherError(
    refused ? 'unauthorized' : 'registry',
    refused
      ? `the registry refused the harness API key for ${access.environmentId} (HTTP ${response.status})${detail}`
      : `the registry answered /cloud/browser-grants with HTTP ${response.status}${detail}`,
    { status: response.status },
  );
}
