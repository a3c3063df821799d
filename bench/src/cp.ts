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
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack } from '@tether/test-kit';
import { harnessEnv, harnessMain, median, timed, writeResults } from './commands.js';
import { type Sshd, startSshd } from './sshd.js';

const SIZE_MIB = Number(process.env.BENCH_CP_MIB ?? 256);
const REPEATS = Number(process.env.BENCH_CP_REPEATS ?? 3);
const ENVIRONMENT = 'bench-cp';

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-cp-'));
const stack = await startStack();
const sshd = await startSshd(dir);
try {
  await stack.startExecutor('tether', ENVIRONMENT);
  const source = join(dir, 'source.bin');
  spawnSync('/bin/sh', ['-c', `head -c ${SIZE_MIB * 1024 * 1024} /dev/urandom > '${source}'`]);
  const bytes = statSync(source).size;
  const harness = harnessMain();
  const env = harnessEnv(stack);
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
  writeResults('cp-latest.json', { sizeMiB: SIZE_MIB, repeats: REPEATS, results, rows });
} finally {
  await sshd?.close();
  await stack.close();
  rmSync(dir, { recursive: true, force: true });
}
