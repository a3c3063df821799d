/**
 * Start-up latency of a whole command: `harness exec -- true` as a user types it (the bin on PATH, through
 * the registry and relay bins to `executor --registry`) against `ssh host true` to a private sshd, each cold
 * (a new connection per command: registry call, relay dial, hybrid Noise handshake, initialize; ssh's key
 * exchange and authentication) and with connection reuse (`harness master start` / ssh ControlMaster).
 * Sides alternate within each repeat; medians. A breakdown of the cold harness path follows (node start,
 * the bundle's load, and the SDK steps timed in this process).
 *
 *   pnpm --filter @tether/bench run bench:startup      (BENCH_STARTUP_REPEATS, default 21)
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Environment, fetchBundle, generateIdentity, rendezvousDialer } from '@tether/client';
import { startStack } from '@tether/test-kit';
import { harnessBinDir, harnessEnv, harnessMain, median, shell, startHarnessMaster, writeResults } from './commands.js';
import { startSshd, startSshMaster } from './sshd.js';

const REPEATS = Number(process.env.BENCH_STARTUP_REPEATS ?? 21);
const ENVIRONMENT = 'bench-startup';

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-startup-'));
const runtime = join(dir, 'run');
mkdirSync(runtime, { mode: 0o700 });
const stack = await startStack();
const sshd = await startSshd(dir);
const out: string[] = [];
const print = (text: string) => {
  out.push(text);
  process.stdout.write(`${text}\n`);
};
const ms = (seconds: number) => seconds * 1000;

try {
  await stack.startExecutor('tether', ENVIRONMENT);
  const master = sshd ? await startSshMaster(sshd, dir) : null;
  const env = {
    ...harnessEnv(stack, ENVIRONMENT),
    PATH: `${harnessBinDir(dir)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
    XDG_RUNTIME_DIR: runtime,
  };
  const commands = {
    harnessCold: 'TETHER_REUSE=no harness exec -- true',
    harnessReuse: 'harness exec -- true',
    sshCold: master ? `${master.command} -o ControlMaster=no -o ControlPath=none true` : null,
    sshReuse: master ? `${master.command} true` : null,
  };
  const harnessMaster = await startHarnessMaster(env);

  const times: Record<keyof typeof commands, number[]> = {
    harnessCold: [],
    harnessReuse: [],
    sshCold: [],
    sshReuse: [],
  };
  const once = async (name: keyof typeof commands) => {
    const command = commands[name];
    if (command === null) return;
    const run = await shell(command, env, { timeoutMs: 60_000 });
    if (run.code !== 0) throw new Error(`${command} exited ${run.code}: ${run.stderr}`);
    times[name].push(run.seconds);
    if (name === 'harnessReuse') await harnessMaster.settle();
  };
  const load = { start: loadavg()[0] as number, end: Number.NaN };
  // One warm-up of each (page cache, sshd's first fork), then alternate.
  for (const name of Object.keys(commands) as Array<keyof typeof commands>) await once(name);
  for (const name of Object.keys(times) as Array<keyof typeof commands>) times[name] = [];
  for (let i = 0; i < REPEATS; i++) {
    await once('harnessReuse');
    await once('sshReuse');
    await once('harnessCold');
    await once('sshCold');
  }
  load.end = loadavg()[0] as number;

  // Breakdown of the cold path.
  const spawnMs = (args: string[]) => {
    const t = performance.now();
    spawnSync(process.execPath, args, { env, stdio: 'ignore' });
    return performance.now() - t;
  };
  const repeatMedian = async (f: () => number | Promise<number>) => {
    const values: number[] = [];
    for (let i = 0; i < REPEATS; i++) values.push(await f());
    return median(values);
  };
  const nodeStart = await repeatMedian(() => spawnMs(['-e', '0']));
  const bundleLoad = await repeatMedian(() => spawnMs([harnessMain(), '--version']));
  const options = {
    registryUrl: stack.registryUrl,
    apiKey: stack.keys.harness,
    environmentId: ENVIRONMENT,
    clientName: 'bench',
  };
  const identityMs = await repeatMedian(() => {
    const t = performance.now();
    generateIdentity();
    return performance.now() - t;
  });
  const identity = generateIdentity();
  const registryMs = await repeatMedian(async () => {
    const t = performance.now();
    await fetchBundle(options, ENVIRONMENT, identity.publicKey);
    return performance.now() - t;
  });
  const dialMs = await repeatMedian(async () => {
    const dialer = rendezvousDialer(options);
    const t = performance.now();
    const transport = await dialer.dial(new AbortController().signal);
    const elapsed = performance.now() - t;
    transport.close(1000, 'bench');
    return elapsed;
  });
  const connectMs = await repeatMedian(async () => {
    const t = performance.now();
    const environment = await Environment.connectRendezvous(options);
    const elapsed = performance.now() - t;
    await environment.close();
    return elapsed;
  });
  const runMs = await repeatMedian(async () => {
    const environment = await Environment.connectRendezvous(options);
    const t = performance.now();
    await environment.exec(['true']);
    const elapsed = performance.now() - t;
    await environment.close();
    return elapsed;
  });

  const m = (values: number[]) => (values.length ? ms(median(values)) : Number.NaN);
  const rows = [
    {
      row: 'whole `exec -- true`, cold (new connection each)',
      tether: m(times.harnessCold),
      ssh: m(times.sshCold),
      target: 0.5,
      tetherCommand: commands.harnessCold,
      sshCommand: 'ssh host true (no ControlMaster)',
    },
    {
      row: 'whole `exec -- true`, connection reuse',
      tether: m(times.harnessReuse),
      ssh: m(times.sshReuse),
      target: 0.9,
      tetherCommand: `${commands.harnessReuse} (after harness master start)`,
      sshCommand: 'ssh host true (ControlMaster, ControlPersist)',
    },
  ];
  print(
    `\nStart-up latency, median of ${REPEATS} (whole commands under sh -c, sides alternating; ${cpus().length} cores, 1-min load average ${load.start.toFixed(1)} → ${load.end.toFixed(1)})\n`,
  );
  print('| row | ssh (ms) | harness (ms) | harness/ssh | target | met |');
  print('|---|---:|---:|---:|---|---|');
  for (const r of rows) {
    const ratio = r.tether / r.ssh;
    const met = Number.isFinite(ratio) ? (ratio <= r.target ? 'yes' : 'no') : 'n/a';
    print(
      `| ${r.row} | ${Number.isFinite(r.ssh) ? r.ssh.toFixed(0) : 'n/a (no sshd)'} | ${r.tether.toFixed(0)} | ${Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : 'n/a'} | ≤ ${r.target.toFixed(1)}× | ${met} |`,
    );
  }
  print('\nWhere a cold `harness exec -- true` spends its time (medians; SDK steps timed in this process)\n');
  print('| step | ms |');
  print('|---|---:|');
  const breakdown = {
    'node start (`node -e 0`)': nodeStart,
    'node + the CLI bundle (`harness --version`)': bundleLoad,
    'harness identity (X25519 + ML-KEM-768 key pair)': identityMs,
    'registry call (bundle)': registryMs,
    'registry + relay dial + hybrid handshake': dialMs,
    'all of set-up (+ initialize)': connectMs,
    '`exec true` on a ready session': runMs,
  };
  for (const [step, value] of Object.entries(breakdown)) print(`| ${step} | ${value.toFixed(1)} |`);
  writeResults('startup-latest.json', {
    repeats: REPEATS,
    cores: cpus().length,
    loadAverage: load,
    rows,
    breakdownMs: breakdown,
    samplesMs: Object.fromEntries(Object.entries(times).map(([k, v]) => [k, v.map(ms)])),
    printed: out.join('\n'),
  });
  await master?.close();
} finally {
  spawnSync(process.execPath, [harnessMain(), 'master', 'stop'], {
    env: { ...harnessEnv(stack, ENVIRONMENT), XDG_RUNTIME_DIR: runtime },
    stdio: 'ignore',
  });
  await sshd?.close();
  await stack.close();
  rmSync(dir, { recursive: true, force: true });
}
