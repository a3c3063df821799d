import { createCipheriv, createHash } from 'node:crypto';
import {
  closeSync,
  createReadStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { descendantPids, peakRssMib, pidExists, rssMib, runToEnd, startStack, waitUntil } from '@tether/test-kit';
import {
  type HarnessMaster,
  harnessBinDir,
  harnessEnv,
  median,
  type ShellRun,
  shell,
  startHarnessMaster,
  writeResults,
} from './commands.js';
import type { LoadPlan, LoadResult } from './path-load.js';
import { type SshMaster, startSshd, startSshMaster } from './sshd.js';

const REPEATS = Number(process.env.BENCH_PATH_REPEATS ?? 3);
/**
 * Unmeasured runs of each side per row before the timed pairs. Three: the harness writes its code cache
 * after each of the first three runs of a command (bundle-runner.ts, GENERATIONS), 20-30 ms of serialising
 * at the end of each, which a user pays on the first three commands after an install and never again; and
 * the executor's and relay's JIT settle over the first streams. ssh gets the same warm-up.
 */
const WARMUP = Number(process.env.BENCH_PATH_WARMUP ?? 3);
const MIB = Number(process.env.BENCH_PATH_MIB ?? 256);
const BYTES = MIB * 1024 * 1024;
const SOURCE = process.env.BENCH_PATH_FILE ?? `/tmp/bench-path-${MIB}M.bin`;
const SSH_CIPHERS = process.env.BENCH_PATH_SSH_CIPHERS || undefined;
const LOAD_CONNECTIONS = Number(process.env.BENCH_PATH_LOAD_CONNECTIONS ?? 50);
const LOAD_PROCESSES = Number(process.env.BENCH_PATH_LOAD_PROCESSES ?? 20);
const LOAD_BYTES = Number(process.env.BENCH_PATH_LOAD_KIB ?? 256) * 1024;
const ONLY_LOAD = process.env.BENCH_PATH_ONLY === 'load';
/** `BENCH_PATH_HARNESS_MASTER=0`: the harness connects anew for each command (no master), for a comparison. */
const WITH_HARNESS_MASTER = process.env.BENCH_PATH_HARNESS_MASTER !== '0';
const ENVIRONMENT = 'bench-path';
/** A command that takes longer has hung (a 256 MiB run takes seconds). */
const COMMAND_TIMEOUT_MS = 120_000;
const LOAD_TIMEOUT_MS = 300_000;
const LOAD_ENVIRONMENT = 'bench-path-load';
/** What Noise carries every byte in (the executor's identity suite, @tether/noise DEFAULT_SUITE). */
const TETHER_SUITE = 'Noise_hybridIK_X25519+MLKEM768_AESGCM_SHA256';

type Side = 'tether' | 'ssh';

// ---------------------------------------------------------------------------------------------------------
// The deterministic source file.

/** The generator's bytes: the AES-128-CTR keystream of a fixed key (fast, and the same on every machine). */
function* seededPieces(bytes: number): Generator<Buffer> {
  const cipher = createCipheriv('aes-128-ctr', Buffer.from('tether bench src'), Buffer.alloc(16));
  const zeros = Buffer.alloc(4 * 1024 * 1024);
  for (let done = 0; done < bytes; done += zeros.byteLength) {
    yield cipher.update(zeros.subarray(0, Math.min(zeros.byteLength, bytes - done)));
  }
}

async function fileSha256(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path, { highWaterMark: 4 * 1024 * 1024 })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** Creates `path` from the generator unless it already holds exactly its bytes; returns their sha256. */
async function ensureSource(path: string, bytes: number): Promise<string> {
  const hash = createHash('sha256');
  for (const piece of seededPieces(bytes)) hash.update(piece);
  const expected = hash.digest('hex');
  if (existsSync(path) && statSync(path).size === bytes && (await fileSha256(path)) === expected) return expected;
  const fd = openSync(path, 'w');
  try {
    for (const piece of seededPieces(bytes)) writeSync(fd, piece);
  } finally {
    closeSync(fd);
  }
  return expected;
}

/** Where `actual` first differs from `expected`, for a failure message. */
function difference(expected: Buffer, actual: Buffer): string {
  const limit = Math.min(expected.byteLength, actual.byteLength);
  let at = 0;
  while (at < limit && expected[at] === actual[at]) at++;
  if (at < limit) {
    // Where the bytes found there belong, if they are the expected ones from elsewhere (moved or repeated).
    const probe = actual.subarray(at, at + 64);
    const from = probe.byteLength >= 16 ? expected.indexOf(probe) : -1;
    return `${actual.byteLength} of ${expected.byteLength} bytes, first difference at byte ${at}${from >= 0 ? ` (what follows is the expected bytes from ${from})` : ''}`;
  }
  if (actual.byteLength < expected.byteLength)
    return `short: ${actual.byteLength} of ${expected.byteLength} bytes, a right prefix`;
  if (actual.byteLength > expected.byteLength)
    return `long: ${actual.byteLength} bytes, expected ${expected.byteLength}`;
  return 'bytes right, yet reported wrong';
}

// ---------------------------------------------------------------------------------------------------------
// CPU time from /proc.

interface Times {
  /** utime + stime, seconds. */
  self: number;
  /** cutime + cstime: children it has reaped (and what they reaped), seconds. */
  children: number;
}

const CLOCK_TICK = 100; // USER_HZ on Linux

function procTimes(pid: number | 'self'): Times {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // After `pid (comm) `: state is [0], utime [11], stime [12], cutime [13], cstime [14] (stat(5) 14–17).
    const f = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    return { self: ((f[11] ?? 0) + (f[12] ?? 0)) / CLOCK_TICK, children: ((f[13] ?? 0) + (f[14] ?? 0)) / CLOCK_TICK };
  } catch {
    return { self: 0, children: 0 };
  }
}

function comm(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '?';
  }
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}

/**
 * Samples the CPU time of `root` and its descendants every few milliseconds while they run, by process name;
 * what a process used after its last sample (at most one interval) is missed, so the shell tree's exact
 * total is taken separately from this process's reaped-children time.
 */
class TreeSampler {
  private readonly last = new Map<number, { name: string; cpu: number }>();
  private timer: NodeJS.Timeout | undefined;

  start(root: number): void {
    const sample = () => {
      for (const pid of [root, ...descendantPids(root)]) {
        const name = comm(pid);
        const known = this.last.get(pid);
        // A fork carries its parent's name until it execs: keep the latest.
        this.last.set(pid, {
          name: name === '?' ? (known?.name ?? name) : name,
          cpu: procTimes(pid).self || (known?.cpu ?? 0),
        });
      }
    };
    sample();
    this.timer = setInterval(sample, 5);
  }

  stop(): Map<string, number> {
    clearInterval(this.timer);
    const byName = new Map<string, number>();
    for (const { name, cpu } of this.last.values()) byName.set(name, (byName.get(name) ?? 0) + cpu);
    return byName;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Rows.

interface Row {
  name: string;
  target: number;
  /** The command for each side (ssh's written `ssh bench …`, with `ssh -F config bench` substituted at run). */
  command: Record<Side, string>;
  /** What is wrong with a run's result (null: right), after the run and outside its time. */
  check(side: Side, run: ShellRun): Promise<string | null>;
}

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-path-'));
const outputs = { tether: join(dir, 'up-tether.bin'), ssh: join(dir, 'up-ssh.bin') };
const sshCommand = (master: SshMaster | null, command: string) =>
  master ? command.replace(/^ssh bench /, `${master.command} `) : command;
const runProblem = (run: ShellRun) =>
  run.timedOut
    ? `timed out after ${COMMAND_TIMEOUT_MS / 1000} s (killed): ${run.stderr.trim().slice(0, 300)}`
    : run.code === 0
      ? null
      : `exited ${run.code ?? run.signal}: ${run.stderr.trim().slice(0, 300)}`;

function rows(sourceSha256: string, verifyCount: (side: Side) => Promise<string | null>): Row[] {
  const upload = (side: Side) => outputs[side];
  return [
    {
      name: `1. \`exec -- head -c ${BYTES} /dev/zero > /dev/null\``,
      target: 1.2,
      command: {
        tether: `harness exec -- head -c ${BYTES} /dev/zero > /dev/null`,
        ssh: `ssh bench head -c ${BYTES} /dev/zero > /dev/null`,
      },
      // The timed command keeps nothing to count, so a separate run of the same through `wc -c` counts.
      check: async (side, run) => runProblem(run) ?? (await verifyCount(side)),
    },
    {
      name: `2. \`exec -- cat ${MIB}M.bin \\| sha256sum\``,
      target: 1.0,
      command: {
        tether: `harness exec -- cat ${SOURCE} | sha256sum`,
        ssh: `ssh bench cat ${SOURCE} | sha256sum`,
      },
      check: async (_side, run) => {
        const got = run.stdout.split(/\s/)[0];
        return got === sourceSha256
          ? runProblem(run)
          : `sha256 ${got}, expected ${sourceSha256} ${runProblem(run) ?? ''}`;
      },
    },
    {
      name: `3. \`exec -i -- sh -c 'cat > f' < ${MIB}M.bin\``,
      target: 1.0,
      command: {
        tether: `harness exec -i -- sh -c 'cat > ${upload('tether')}' < ${SOURCE}`,
        ssh: `ssh bench "sh -c 'cat > ${upload('ssh')}'" < ${SOURCE}`,
      },
      check: async (side, run) => {
        const problem = runProblem(run);
        const file = upload(side);
        const size = existsSync(file) ? statSync(file).size : -1;
        const sha = size >= 0 ? await fileSha256(file) : '';
        rmSync(file, { force: true });
        if (size !== BYTES)
          return `wrote ${size < 0 ? 'no file' : `${size} bytes`}, expected ${BYTES} ${problem ?? ''}`;
        return sha === sourceSha256 ? problem : `written file's sha256 ${sha}, expected ${sourceSha256}`;
      },
    },
  ];
}

/** A label for a command as typed (the ssh config file is a user's ~/.ssh/config). */
const shown = (command: string) => command.replaceAll(`${dir}/`, '/tmp/');

// ---------------------------------------------------------------------------------------------------------

const stack = await startStack();
const sshd = ONLY_LOAD ? null : await startSshd(dir);
let master: SshMaster | null = null;
let harnessMaster: HarnessMaster | null = null;
const fmt = (n: number) => (n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2));
const out: string[] = [];
const print = (text: string) => {
  out.push(text);
  process.stdout.write(`${text}\n`);
};
try {
  const executor = await stack.startExecutor('tether', ENVIRONMENT);
  const runtime = join(dir, 'run');
  mkdirSync(runtime, { mode: 0o700 });
  const env = {
    ...harnessEnv(stack, ENVIRONMENT),
    PATH: `${harnessBinDir(dir)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    XDG_RUNTIME_DIR: runtime,
  };
  // The stack's relay and registry: our children running those bins.
  const stackPid = (app: string) =>
    descendantPids(process.pid).find((pid) => cmdline(pid).includes(join('apps', app, 'dist', 'main.js'))) ?? -1;
  const relayPid = stackPid('relay');
  const registryPid = stackPid('registry');
  master = sshd ? await startSshMaster(sshd, dir, SSH_CIPHERS) : null;
  // Each side with its connection master, started beforehand and kept: ssh's ControlMaster, the harness's.
  harnessMaster = ONLY_LOAD || !WITH_HARNESS_MASTER ? null : await startHarnessMaster(env);
  await harnessMaster?.settle();

  const results: Record<string, unknown> = {
    repeats: REPEATS,
    bytes: BYTES,
    cores: cpus().length,
    sshCipher: master?.cipher ?? null,
    tetherSuite: TETHER_SUITE,
  };
  const table: Array<{
    row: string;
    tether: number;
    ssh: number | null;
    ratio: number | null;
    target: number;
    failed: string[];
  }> = [];
  const cpuRows: string[] = [];

  const sourceSha256 = await ensureSource(SOURCE, BYTES);
  const sourceBytes = BYTES;
  const loadAverage = { start: loadavg()[0] as number, end: Number.NaN };
  if (!ONLY_LOAD) {
    const verifyCount = async (side: Side) => {
      const command =
        side === 'tether'
          ? `harness exec -- head -c ${BYTES} /dev/zero | wc -c`
          : `ssh bench head -c ${BYTES} /dev/zero | wc -c`;
      const run = await shell(sshCommand(master, command), env, { timeoutMs: COMMAND_TIMEOUT_MS });
      if (side === 'tether') await harnessMaster?.settle();
      const count = Number(run.stdout.trim());
      return count === BYTES
        ? runProblem(run)
        : `\`${shown(command)}\` counted ${run.stdout.trim() || 'nothing'}, expected ${BYTES} ${runProblem(run) ?? ''}`;
    };
    const all = rows(sourceSha256, verifyCount);
    const runs: Record<string, Record<Side, number[]>> = {};
    const problems: Record<string, string[]> = {};
    const problemsOf = (row: Row) => {
      problems[row.name] ??= [];
      return problems[row.name] as string[];
    };
    const sides: Side[] = master ? ['tether', 'ssh'] : ['tether'];
    const once = async (row: Row, side: Side) => {
      const run = await shell(sshCommand(master, row.command[side]), env, { timeoutMs: COMMAND_TIMEOUT_MS });
      if (side === 'tether') await harnessMaster?.settle();
      const problem = await row.check(side, run);
      if (problem) problemsOf(row).push(`${side}: ${problem}`);
      return run.seconds;
    };
    for (const row of all) {
      runs[row.name] = { tether: [], ssh: [] };
      for (let warm = 0; warm < WARMUP; warm++) for (const side of sides) await once(row, side); // verified, not timed
      for (let round = 0; round < REPEATS; round++) {
        const order = round % 2 === 0 ? sides : [...sides].reverse();
        for (const side of order) runs[row.name]![side].push(await once(row, side));
      }
    }

    // One more run of each side per row, with every process's CPU time.
    const profiles: Record<string, Record<Side, Record<string, number>>> = {};
    for (const row of all) {
      profiles[row.name] = { tether: {}, ssh: {} };
      for (const side of sides) {
        // The harness's command runs in its master's warm process (a child of the master): its CPU is the
        // master's reaped children's once it ended, less what it spent before (loading, setting up its channel).
        const viaMaster = side === 'tether' ? harnessMaster : null;
        const warmPid = viaMaster ? await viaMaster.settle() : -1;
        const harnessBefore = viaMaster ? procTimes(viaMaster.pid) : { self: 0, children: 0 };
        const warmBefore = viaMaster ? procTimes(warmPid).self : 0;
        const longLived =
          side === 'tether'
            ? { relay: [relayPid], registry: [registryPid], server: [executor.pid] }
            : { relay: [master!.pid], registry: [], server: [sshd!.pid, ...descendantPids(sshd!.pid)] };
        const sum = (pids: number[], key: keyof Times) => pids.reduce((total, pid) => total + procTimes(pid)[key], 0);
        const before = {
          relay: sum(longLived.relay, 'self'),
          registry: sum(longLived.registry, 'self'),
          server: sum(longLived.server, 'self'),
          remote: sum(longLived.server, 'children'),
          tree: procTimes('self').children,
        };
        const sampler = new TreeSampler();
        const run = await shell(sshCommand(master, row.command[side]), env, {
          onSpawn: (pid) => sampler.start(pid),
          timeoutMs: COMMAND_TIMEOUT_MS,
        });
        const byName = sampler.stop();
        const tree = procTimes('self').children - before.tree;
        // The command's own process, in the shell's tree (sampled).
        const sampled = byName.get(side === 'tether' ? 'node' : 'ssh') ?? 0;
        let client = sampled;
        if (viaMaster) {
          // Reaped, not only ended: its CPU joins the master's children's then (a zombie's has not yet).
          await waitUntil(() => !pidExists(warmPid), 'the warm process to be reaped by its master');
          const harnessAfter = procTimes(viaMaster.pid);
          client +=
            harnessAfter.self - harnessBefore.self + (harnessAfter.children - harnessBefore.children - warmBefore);
        }
        const profile = {
          client,
          relay: sum(longLived.relay, 'self') - before.relay,
          registry: sum(longLived.registry, 'self') - before.registry,
          server: sum(longLived.server, 'self') - before.server,
          remote: sum(longLived.server, 'children') - before.remote,
          // The shell, the local end of the pipe (wc, sha256sum) and what sampling missed of the client.
          local: Math.max(0, tree - sampled),
          wall: run.seconds,
        };
        // Checked once every figure is read (row 1's check is a command of its own).
        const problem = await row.check(side, run);
        if (problem) problemsOf(row).push(`${side} (profiled run): ${problem}`);
        profiles[row.name]![side] = {
          ...profile,
          ...Object.fromEntries([...byName].map(([name, cpu]) => [`sampled:${name}`, cpu])),
        };
        const total =
          profile.client + profile.relay + profile.registry + profile.server + profile.remote + profile.local;
        cpuRows.push(
          `| ${row.name} | ${side === 'tether' ? 'harness' : 'ssh'} | ${profile.client.toFixed(2)} | ${side === 'tether' ? `relay ${profile.relay.toFixed(2)}, registry ${profile.registry.toFixed(2)}` : `master ${profile.relay.toFixed(2)}`} | ${side === 'tether' ? 'executor' : 'sshd'} ${profile.server.toFixed(2)} | ${profile.remote.toFixed(2)} | ${profile.local.toFixed(2)} | ${total.toFixed(2)} | ${profile.wall.toFixed(2)} |`,
        );
      }
    }
    for (const row of all) {
      const r = runs[row.name]!;
      const tether = BYTES / 1e6 / median(r.tether);
      const ssh = r.ssh.length ? BYTES / 1e6 / median(r.ssh) : null;
      table.push({
        row: row.name,
        tether,
        ssh,
        ratio: ssh ? tether / ssh : null,
        target: row.target,
        failed: problems[row.name] ?? [],
      });
    }
    results.commands = Object.fromEntries(
      all.map((row) => [row.name, { tether: shown(row.command.tether), ssh: shown(row.command.ssh) }]),
    );
    results.seconds = runs;
    results.problems = problems;
    results.profiles = profiles;
  }

  // The load: a fresh executor, so that its peak RSS is this load's.
  const loadExecutor = await stack.startExecutor('tether', LOAD_ENVIRONMENT);
  const idleRss = rssMib(loadExecutor.pid);
  // Process i prints slice i of the seeded file (dd: one read, one write, next to no CPU of its own), so every
  // process's bytes are its own and a byte delivered to the wrong process shows as well as a lost one.
  const slices = Math.floor(sourceBytes / LOAD_BYTES);
  if (slices < 1) throw new Error(`BENCH_PATH_LOAD_KIB must not exceed BENCH_PATH_MIB × 1024`);
  const slice = (i: number) => {
    const bytes = Buffer.alloc(LOAD_BYTES);
    const fd = openSync(SOURCE, 'r');
    try {
      readSync(fd, bytes, 0, LOAD_BYTES, (i % slices) * LOAD_BYTES);
    } finally {
      closeSync(fd);
    }
    return bytes;
  };
  const jobs: LoadPlan['jobs'] = [];
  for (let i = 0; i < LOAD_CONNECTIONS * LOAD_PROCESSES; i++) {
    jobs.push({
      argv: ['dd', `if=${SOURCE}`, `bs=${LOAD_BYTES}`, `skip=${i % slices}`, 'count=1', 'status=none'],
      bytes: LOAD_BYTES,
      sha256: createHash('sha256').update(slice(i)).digest('hex'),
    });
  }
  const planFile = join(dir, 'load-plan.json');
  const plan: LoadPlan = {
    registryUrl: stack.registryUrl,
    apiKey: stack.keys.harness,
    environmentId: LOAD_ENVIRONMENT,
    connections: LOAD_CONNECTIONS,
    jobs,
    keepDir: dir,
  };
  writeFileSync(planFile, JSON.stringify(plan));
  const loadBefore = {
    executor: procTimes(loadExecutor.pid),
    relay: procTimes(relayPid).self,
    registry: procTimes(registryPid).self,
  };
  // Plain node + tsx (no tether-source condition): the load script runs the built SDK and its built deps.
  const loadScript = fileURLToPath(new URL('./path-load.ts', import.meta.url));
  const loadRun = await runToEnd(process.execPath, ['--import', 'tsx', loadScript, planFile], {
    timeoutMs: LOAD_TIMEOUT_MS,
  });
  if (loadRun.signal === 'SIGKILL') loadRun.stderr += `\n(killed after ${LOAD_TIMEOUT_MS / 1000} s)`;
  const executorAfter = procTimes(loadExecutor.pid);
  const load = {
    executorPeakRssMiB: peakRssMib(loadExecutor.pid),
    executorIdleRssMiB: idleRss,
    executorCpuSeconds: executorAfter.self - loadBefore.executor.self,
    processesCpuSeconds: executorAfter.children - loadBefore.executor.children,
    relayCpuSeconds: procTimes(relayPid).self - loadBefore.relay,
    registryCpuSeconds: procTimes(registryPid).self - loadBefore.registry,
    result: null as LoadResult | null,
    divergence: [] as string[],
    error: null as string | null,
  };
  try {
    load.result = JSON.parse(loadRun.stdout.trim().split('\n').pop() ?? '') as LoadResult;
  } catch {
    load.error = `load script exited ${loadRun.code}: ${loadRun.stderr.trim().slice(0, 2000)}`;
  }
  for (const failure of load.result?.failures ?? []) {
    if (!failure.kept) continue;
    const expected = slice(failure.connection * LOAD_PROCESSES + failure.process);
    load.divergence.push(
      `connection ${failure.connection} process ${failure.process}: ${difference(expected, readFileSync(failure.kept))}`,
    );
  }
  results.load = load;
  loadAverage.end = loadavg()[0] as number;
  results.loadAverage = loadAverage;

  // ---------------------------------------------------------------------------------------------------------
  if (!ONLY_LOAD) {
    print(
      `\nFull path, ${MIB} MiB, median of ${REPEATS} (whole commands under sh -c, tether/ssh alternating; ${cpus().length} cores, 1-min load average ${loadAverage.start.toFixed(1)} at the start and ${loadAverage.end.toFixed(1)} at the end; every run's bytes checked)`,
    );
    print(
      `tether: harness CLI${harnessMaster ? ' through `harness master` (its warm process, with a channel of its own)' : ', a new connection each'} → registry + relay → executor --registry, ${TETHER_SUITE}; ssh: OpenSSH over one ControlMaster connection, negotiated cipher ${master?.cipher ?? 'n/a'}${SSH_CIPHERS ? ' (set by BENCH_PATH_SSH_CIPHERS)' : " (ssh's default)"}\n`,
    );
    print('| row | ssh (MB/s) | harness (MB/s) | harness/ssh | target | met |');
    print('|---|---:|---:|---:|---|---|');
    for (const row of table) {
      const failed = row.failed.length > 0;
      const ratio = row.ratio === null ? 'n/a' : `${row.ratio.toFixed(2)}×`;
      const met = failed ? '**FAILED**' : row.ratio === null ? 'n/a' : row.ratio >= row.target ? 'yes' : 'no';
      print(
        `| ${row.row} | ${row.ssh === null ? 'n/a (no sshd)' : row.ssh.toFixed(0)} | ${row.tether.toFixed(0)} | ${ratio} | ≥ ${row.target.toFixed(1)}× | ${met} |`,
      );
    }
    for (const row of table) for (const failure of row.failed) print(`FAILED ${row.row}: ${failure}`);
    print(`\nCPU-s per ${MIB} MiB (one extra run of each; client sampled every 5 ms, the rest from /proc exactly)\n`);
    print(
      '| row | side | client | relay / ssh master | server | remote command | local shell + sink | total | wall s |',
    );
    print('|---|---|---:|---|---|---:|---:|---:|---:|');
    for (const line of cpuRows) print(line);
  }
  const result = load.result;
  print(
    `\nLoad: ${LOAD_CONNECTIONS} SDK connections × ${LOAD_PROCESSES} concurrent processes, ${LOAD_BYTES / 1024} KiB each (dd, its own slice of the seeded file), sha256 checked per process\n`,
  );
  print('| metric | value |');
  print('|---|---:|');
  if (result) {
    const wrong = result.failures.length;
    print(`| processes right | ${result.processes - wrong} of ${result.processes}${wrong ? ' **FAILED**' : ''} |`);
    print(`| aggregate (MB/s) | ${fmt(result.bytes / 1e6 / result.seconds)} |`);
    print(`| all processes start → last exit (s) | ${result.seconds.toFixed(2)} |`);
    print(`| ${LOAD_CONNECTIONS} connections set up (s) | ${result.connectSeconds.toFixed(2)} |`);
  } else print(`| result | **FAILED**: ${load.error} |`);
  print(`| executor peak RSS, VmHWM (MiB) | ${fmt(load.executorPeakRssMiB)} (idle ${fmt(load.executorIdleRssMiB)}) |`);
  print(
    `| CPU-s: executor / its processes / relay / registry / SDK process | ${load.executorCpuSeconds.toFixed(2)} / ${load.processesCpuSeconds.toFixed(2)} / ${load.relayCpuSeconds.toFixed(2)} / ${load.registryCpuSeconds.toFixed(2)} / ${result?.cpuSeconds.toFixed(2) ?? 'n/a'} |`,
  );
  for (const failure of result?.failures.slice(0, 10) ?? []) {
    print(
      `FAILED load, connection ${failure.connection} process ${failure.process}: exit ${failure.exitCode}, ${failure.bytes} of ${failure.expectedBytes} bytes${failure.error ? `, ${failure.error}` : ''}`,
    );
  }
  for (const line of load.divergence) print(`  ${line}`);
  results.table = table;
  writeResults('path-latest.json', { ...results, printed: out.join('\n') });
} finally {
  await harnessMaster?.stop();
  await master?.close();
  await sshd?.close();
  await stack.close();
  rmSync(dir, { recursive: true, force: true });
}
