/**
 * `pnpm bench` (file copy section; alone: `pnpm --filter @tether/bench bench:cp`): `harness cp` through the
 * full path (registry, relay and executor bins; Noise end to end; sha256 verified) side by side with `scp`
 * to a private OpenSSH server on loopback, same file, same run. Whole commands are timed (process start,
 * connect and handshake included on both sides), each direction both onto a new file and over the copy
 * just made (which scp, and now harness cp, overwrite in place). Prints a table and writes
 * bench/results/cp-latest.json.
 *
 *   BENCH_CP_MIB=256 BENCH_CP_REPEATS=3 pnpm --filter @tether/bench bench:cp
 *
 * Needs `sshd` (Debian: openssh-server); without it the scp column is reported as unavailable.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { freePort, repoRoot, startStack } from '@tether/test-kit';

const SIZE_MIB = Number(process.env.BENCH_CP_MIB ?? 256);
const REPEATS = Number(process.env.BENCH_CP_REPEATS ?? 3);
const ENVIRONMENT = 'bench-cp';
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] as number;

/** Runs a command to completion; returns its wall time in seconds (throws on failure). */
function timed(command: string, args: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(command, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d;
    });
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code === 0) resolve((performance.now() - started) / 1000);
      else reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${stderr}`));
    });
  });
}

interface Sshd {
  scpArgs: string[];
  close(): Promise<void>;
}

/** A throwaway sshd on loopback with its own host key and one authorized client key. */
async function startSshd(dir: string): Promise<Sshd | null> {
  const sshd = ['/usr/sbin/sshd', '/usr/bin/sshd'].find((path) => existsSync(path));
  if (!sshd) return null;
  const hostKey = join(dir, 'host_ed25519');
  const clientKey = join(dir, 'client_ed25519');
  for (const key of [hostKey, clientKey]) {
    spawnSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', key], { stdio: 'ignore' });
  }
  writeFileSync(join(dir, 'authorized_keys'), spawnSync('cat', [`${clientKey}.pub`], { encoding: 'utf8' }).stdout, {
    mode: 0o600,
  });
  mkdirSync('/run/sshd', { recursive: true, mode: 0o755 });
  const port = await freePort();
  const config = join(dir, 'sshd_config');
  writeFileSync(
    config,
    [
      `Port ${port}`,
      'ListenAddress 127.0.0.1',
      `HostKey ${hostKey}`,
      `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
      `PidFile ${join(dir, 'sshd.pid')}`,
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'UsePAM no',
      'StrictModes no',
      'PermitRootLogin yes',
      'Subsystem sftp internal-sftp',
    ].join('\n'),
  );
  const child = spawn(sshd, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  // Ready when a connection succeeds.
  const user = process.env.USER ?? 'root';
  const sshArgs = [
    '-i',
    clientKey,
    '-o',
    'StrictHostKeyChecking=no',
    '-o',
    'UserKnownHostsFile=/dev/null',
    '-o',
    'LogLevel=ERROR',
    '-o',
    'BatchMode=yes',
  ];
  for (let attempt = 0; attempt < 50; attempt++) {
    const probe = spawnSync('ssh', [...sshArgs, '-p', String(port), `${user}@127.0.0.1`, 'true'], { stdio: 'ignore' });
    if (probe.status === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    scpArgs: [...sshArgs, '-P', String(port)],
    close: async () => {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-cp-'));
const stack = await startStack();
const sshd = await startSshd(dir);
try {
  await stack.startExecutor('tether', ENVIRONMENT);
  const source = join(dir, 'source.bin');
  spawnSync('/bin/sh', ['-c', `head -c ${SIZE_MIB * 1024 * 1024} /dev/urandom > '${source}'`]);
  const bytes = statSync(source).size;
  const harness = join(repoRoot(), 'apps', 'harness', 'dist', 'main.js');
  const env = { ...process.env, TETHER_REGISTRY_URL: stack.registryUrl, TETHER_API_KEY: stack.keys.harness };
  const user = process.env.USER ?? 'root';
  // Each direction twice: onto the previous round's copy (both tools then write in place) and onto a new
  // file (the destination removed first, for both), where the kernel must find fresh pages for every byte.
  const cases = [
    'upload, over the last copy',
    'download, over the last copy',
    'upload, new file',
    'download, new file',
  ];
  const results: Record<string, { scp: number[]; tether: number[] }> = Object.fromEntries(
    cases.map((name) => [name, { scp: [], tether: [] }]),
  );
  const copies = {
    scp: {
      up: [source, `${user}@127.0.0.1:${dir}/scp-up.bin`],
      down: [`${user}@127.0.0.1:${dir}/scp-up.bin`, join(dir, 'scp-down.bin')],
      files: [join(dir, 'scp-up.bin'), join(dir, 'scp-down.bin')],
    },
    tether: {
      up: [source, `${ENVIRONMENT}:${dir}/t-up.bin`],
      down: [`${ENVIRONMENT}:${dir}/t-up.bin`, join(dir, 't-down.bin')],
      files: [join(dir, 't-up.bin'), join(dir, 't-down.bin')],
    },
  } as const;
  const run = (peer: 'scp' | 'tether', from: string, to: string) =>
    peer === 'scp'
      ? timed('scp', ['-q', ...(sshd as Sshd).scpArgs, from, to])
      : timed(process.execPath, [harness, 'cp', '-q', from, to], env);
  for (let round = 0; round < REPEATS; round++) {
    // Alternate who goes first so neither always gets the warm page cache.
    const order = round % 2 === 0 ? (['scp', 'tether'] as const) : (['tether', 'scp'] as const);
    for (const peer of order) {
      if (peer === 'scp' && !sshd) continue;
      const copy = copies[peer];
      const [upFile, downFile] = copy.files;
      results['upload, new file']![peer].push(await run(peer, copy.up[0], copy.up[1]));
      results['download, new file']![peer].push(await run(peer, copy.down[0], copy.down[1]));
      results['upload, over the last copy']![peer].push(await run(peer, copy.up[0], copy.up[1]));
      results['download, over the last copy']![peer].push(await run(peer, copy.down[0], copy.down[1]));
      rmSync(upFile, { force: true });
      rmSync(downFile, { force: true });
    }
  }
  const mbps = (seconds: number) => bytes / 1e6 / seconds;
  const rows = Object.entries(results).map(([direction, r]) => {
    const scp = r.scp.length ? mbps(median(r.scp)) : null;
    const tether = mbps(median(r.tether));
    return { direction, scp, tether, ratio: scp ? tether / scp : null };
  });
  process.stdout.write(
    `\nFile copy, ${SIZE_MIB} MiB, median of ${REPEATS} (whole commands; tether verifies sha256 at the destination)\n\n`,
  );
  process.stdout.write(
    '| direction | scp (MB/s) | harness cp (MB/s) | harness/scp | target | met |\n|---|---:|---:|---:|---|---|\n',
  );
  for (const row of rows) {
    process.stdout.write(
      `| ${row.direction} | ${row.scp?.toFixed(0) ?? 'n/a (no sshd)'} | ${row.tether.toFixed(0)} | ${row.ratio ? `${row.ratio.toFixed(2)}×` : 'n/a'} | ≥ 1.0× | ${row.ratio === null ? 'n/a' : row.ratio >= 1 ? 'yes' : 'no'} |\n`,
    );
  }
  const out = join(repoRoot(), 'bench', 'results');
  mkdirSync(out, { recursive: true });
  writeFileSync(
    join(out, 'cp-latest.json'),
    `${JSON.stringify({ sizeMiB: SIZE_MIB, repeats: REPEATS, results, rows }, null, 2)}\n`,
  );
} finally {
  await sshd?.close();
  await stack.close();
  rmSync(dir, { recursive: true, force: true });
}
