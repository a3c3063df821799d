/**
 * `pnpm --filter @tether/bench bench:cp-many`: many small files. `harness cp -r` of a tree of
 * BENCH_CP_MANY_FILES × BENCH_CP_MANY_KIB KiB files (in nested directories) through the full path (registry,
 * relay and executor bins; Noise end to end; every file's sha256 verified) side by side with `scp -r` and
 * `rsync -a` over ssh to a private OpenSSH server on loopback, same tree, same run. Whole commands are timed
 * (process start, connect and handshake included for every tool), each direction onto a fresh destination.
 * Every copy is checked byte for byte against the source tree. Prints a table and writes
 * bench/results/cp-many-latest.json.
 *
 *   BENCH_CP_MANY_FILES=2000 BENCH_CP_MANY_KIB=4 BENCH_CP_MANY_REPEATS=5 pnpm --filter @tether/bench bench:cp-many
 *
 * Needs `sshd` (Debian: openssh-server); without it the scp and rsync columns are reported as unavailable.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack } from '@tether/test-kit';
import { harnessEnv, harnessMain, median, timed, writeResults } from './commands.js';
import { type Sshd, startSshd } from './sshd.js';

const FILES = Number(process.env.BENCH_CP_MANY_FILES ?? 2000);
const KIB = Number(process.env.BENCH_CP_MANY_KIB ?? 4);
const REPEATS = Number(process.env.BENCH_CP_MANY_REPEATS ?? 5);
const ENVIRONMENT = 'bench-cp-many';
/** Files per directory: 2000 files make 20 directories in two levels. */
const PER_DIRECTORY = 100;
/** BENCH_CP_MANY_PRESERVE=0 leaves out the -p rows. */
const PRESERVE = process.env.BENCH_CP_MANY_PRESERVE !== '0';

/** The source tree: `FILES` files of `KIB` KiB of random bytes, PER_DIRECTORY to a directory, nested. */
function makeTree(root: string): void {
  for (let i = 0; i < FILES; i++) {
    const group = Math.floor(i / PER_DIRECTORY);
    const directory = join(root, `d${Math.floor(group / 4)}`, `e${group % 4}`);
    if (i % PER_DIRECTORY === 0) mkdirSync(directory, { recursive: true });
    writeFileSync(join(directory, `f${i}.bin`), randomBytes(KIB * 1024));
  }
}

/** Every file under `root`, relative, sorted. */
function listTree(root: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(root, prefix), { withFileTypes: true })) {
    const relative = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) out.push(...listTree(root, relative));
    else out.push(relative);
  }
  return out.sort();
}

/** Throws unless `copy` holds exactly the files of `source`, byte for byte. */
function verifyTree(source: string, copy: string, who: string): void {
  const expected = listTree(source);
  const actual = listTree(copy);
  if (expected.join('\n') !== actual.join('\n')) {
    throw new Error(`${who}: ${actual.length} files at the destination, ${expected.length} expected`);
  }
  for (const file of expected) {
    if (!readFileSync(join(source, file)).equals(readFileSync(join(copy, file)))) {
      throw new Error(`${who}: ${file} differs`);
    }
  }
}

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-cp-many-'));
const stack = await startStack();
const sshd = await startSshd(dir);
try {
  await stack.startExecutor('tether', ENVIRONMENT);
  const source = join(dir, 'tree');
  makeTree(source);
  const bytes = FILES * KIB * 1024;
  const harness = harnessMain();
  const env = harnessEnv(stack);
  const ssh = sshd as Sshd | null;
  const remote = (path: string) => `${ssh?.user}@127.0.0.1:${path}`;
  const rsyncShell = ssh ? ['ssh', ...ssh.scpArgs.map((a) => (a === '-P' ? '-p' : a))].join(' ') : '';
  type Peer = 'scp' | 'rsync' | 'tether';
  const peers: Peer[] = ['scp', 'rsync', 'tether'];
  const run = (peer: Peer, from: string, to: string, preserve: boolean): Promise<number> => {
    if (peer === 'scp')
      return timed('scp', ['-q', '-r', ...(preserve ? ['-p'] : []), ...(ssh as Sshd).scpArgs, from, to]);
    if (peer === 'rsync') return timed('rsync', [preserve ? '-a' : '-r', '-e', rsyncShell, `${from}/`, to]);
    return timed(process.execPath, [harness, 'cp', '-q', '-r', ...(preserve ? ['-p'] : []), from, to], env);
  };
  const cases = PRESERVE ? ['upload', 'download', 'upload -p', 'download -p'] : ['upload', 'download'];
  const results: Record<string, Record<Peer, number[]>> = Object.fromEntries(
    cases.map((name) => [name, { scp: [], rsync: [], tether: [] }]),
  );
  for (let round = 0; round < REPEATS; round++) {
    // Rotate who goes first so no one always gets the warm page cache.
    const order = [...peers.slice(round % 3), ...peers.slice(0, round % 3)];
    for (const peer of order) {
      if (peer !== 'tether' && !ssh) continue;
      for (const preserve of PRESERVE ? [false, true] : [false]) {
        const up = join(dir, `${peer}-up`);
        const down = join(dir, `${peer}-down`);
        rmSync(up, { recursive: true, force: true });
        rmSync(down, { recursive: true, force: true });
        const suffix = preserve ? ' -p' : '';
        const upTo = peer === 'tether' ? `${ENVIRONMENT}:${up}` : remote(up);
        results[`upload${suffix}`]![peer].push(await run(peer, source, upTo, preserve));
        verifyTree(source, up, `${peer} upload`);
        const downFrom = peer === 'tether' ? `${ENVIRONMENT}:${up}` : remote(up);
        results[`download${suffix}`]![peer].push(await run(peer, downFrom, down, preserve));
        verifyTree(source, down, `${peer} download`);
        if (preserve) {
          const first = listTree(source)[0] as string;
          const mtime = (root: string) => Math.floor(statSync(join(root, first)).mtimeMs / 1000);
          if (mtime(down) !== mtime(source)) throw new Error(`${peer} -p did not keep the modification time`);
        }
        rmSync(up, { recursive: true, force: true });
        rmSync(down, { recursive: true, force: true });
      }
    }
  }
  const rows = Object.entries(results).map(([direction, r]) => {
    const seconds = (peer: Peer) => (r[peer].length ? median(r[peer]) : null);
    const scp = seconds('scp');
    const rsync = seconds('rsync');
    const tether = seconds('tether') as number;
    return { direction, scp, rsync, tether, ratio: scp ? scp / tether : null };
  });
  process.stdout.write(
    `\nMany small files: cp -r of ${FILES} × ${KIB} KiB (${(bytes / 1e6).toFixed(1)} MB), median of ${REPEATS} (whole commands; tether verifies every file's sha256)\n\n`,
  );
  process.stdout.write(
    '| direction | scp -r (s) | rsync over ssh (s) | harness cp -r (s) | speed vs scp | target | met |\n|---|---:|---:|---:|---:|---|---|\n',
  );
  const s = (value: number | null) => (value === null ? 'n/a (no sshd)' : value.toFixed(2));
  for (const row of rows) {
    process.stdout.write(
      `| ${row.direction} | ${s(row.scp)} | ${s(row.rsync)} | ${row.tether.toFixed(2)} | ${row.ratio ? `${row.ratio.toFixed(2)}×` : 'n/a'} | ≥ 1.0× | ${row.ratio === null ? 'n/a' : row.ratio >= 1 ? 'yes' : 'no'} |\n`,
    );
  }
  writeResults('cp-many-latest.json', { files: FILES, kib: KIB, repeats: REPEATS, results, rows });
} finally {
  await sshd?.close();
  await stack.close();
  rmSync(dir, { recursive: true, force: true });
}
