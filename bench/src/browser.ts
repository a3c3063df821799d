/**
 * The browser terminal's figures, in Debian's Chromium against the registry, relay and executor bins: keystroke
 * echo (the time from a key to the next output, measured in the page) next to the Node SDK's over the same
 * stack, and a download into the page (1 MiB blocks, AES-GCM in JavaScript) next to `harness cp` of the same
 * file. Medians.
 *
 *   pnpm --filter @tether/bench run bench:browser
 *   (BENCH_BROWSER_KEYS, default 60; BENCH_BROWSER_MIB, default 32; BENCH_BROWSER_REPEATS, default 3)
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Environment } from '@tether/client';
import { repoRoot, startBrowser, startStack } from '@tether/test-kit';
import { harnessEnv, harnessMain, median, timed, writeResults } from './commands.js';

const KEYS = Number(process.env.BENCH_BROWSER_KEYS ?? 60);
const MIB = Number(process.env.BENCH_BROWSER_MIB ?? 32);
const REPEATS = Number(process.env.BENCH_BROWSER_REPEATS ?? 3);
const ENVIRONMENT = 'bench-browser';
const KEY_GAP_MS = 50;

interface PageHook {
  state(): string;
  echoLatencies(): number[];
  transfers(): Array<{ direction: string; state: string; bytes: number; elapsedMs: number | null }>;
}
declare const tether: PageHook;

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-browser-'));
const stack = await startStack({ registryArgs: ['--ui-dir', join(repoRoot(), 'packages', 'web', 'dist')] });
const browser = await startBrowser();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
try {
  await stack.startExecutor('tether', ENVIRONMENT);
  const file = join(dir, 'payload.bin');
  writeFileSync(file, randomBytes(MIB * 1024 * 1024));

  // The page: sign in with the harness key, a login shell in the terminal.
  const { page } = await browser.newPage({ viewport: { width: 1000, height: 700 }, acceptDownloads: true });
  await page.goto(`${stack.registryUrl}/ui/#env=${ENVIRONMENT}`);
  await page.fill('#api-key', stack.keys.harness);
  await page.click('#connect');
  await page.waitForFunction(() => tether.state() === 'connected', null, { timeout: 20_000 });
  await sleep(1000);
  await page.click('#terminal');
  for (let i = 0; i < KEYS; i++) {
    await page.keyboard.type('x');
    await sleep(KEY_GAP_MS);
  }
  await page.keyboard.press('Control+U');
  const pageEcho = await page.evaluate(() => tether.echoLatencies());

  // The SDK over the same stack: an interactive bash in a PTY, one key at a time.
  const sdk = await Environment.connectRendezvous({
    registryUrl: stack.registryUrl,
    apiKey: stack.keys.harness,
    environmentId: ENVIRONMENT,
  });
  const shell = await sdk.spawn(['bash', '--norc', '-i'], { tty: true, size: { rows: 30, cols: 100 } });
  let keyAt: number | null = null;
  const sdkEcho: number[] = [];
  const pump = (async () => {
    for await (const event of shell) {
      if (event.kind === 'output' && keyAt !== null) {
        sdkEcho.push(performance.now() - keyAt);
        keyAt = null;
      }
    }
  })();
  await sleep(1000);
  for (let i = 0; i < KEYS; i++) {
    keyAt = performance.now();
    await shell.write('x');
    await sleep(KEY_GAP_MS);
  }
  await shell.terminate();
  await pump.catch(() => undefined);
  await sdk.close();

  // Downloads: into the page, and with harness cp, alternating.
  const pageMBs: number[] = [];
  const cpMBs: number[] = [];
  const bytes = MIB * 1024 * 1024;
  const env = harnessEnv(stack, ENVIRONMENT);
  for (let r = 0; r < REPEATS; r++) {
    await page.fill('#download-path', file);
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download')]);
    await download.path();
    const done = await page.evaluate(() => tether.transfers().filter((t) => t.direction === 'download'));
    const last = done[done.length - 1];
    if (last?.state !== 'done' || last.bytes !== bytes || last.elapsedMs === null) {
      throw new Error(`the page's download did not finish whole: ${JSON.stringify(last)}`);
    }
    pageMBs.push(bytes / 1e6 / (last.elapsedMs / 1000));
    const seconds = await timed(
      process.execPath,
      [harnessMain(), 'cp', `${ENVIRONMENT}:${file}`, join(dir, `cp-${r}.bin`)],
      env,
    );
    cpMBs.push(bytes / 1e6 / seconds);
  }

  const results = {
    keys: KEYS,
    mib: MIB,
    repeats: REPEATS,
    echoMs: { page: median(pageEcho), sdk: median(sdkEcho) },
    downloadMBs: { page: median(pageMBs), harnessCp: median(cpMBs) },
    samples: { pageEcho, sdkEcho, pageMBs, cpMBs },
  };
  const f = (n: number) => n.toFixed(1);
  console.log(`| ${KEYS} keys, ${MIB} MiB ×${REPEATS} | page (Chromium) | Node SDK / harness cp |`);
  console.log('|---|---|---|');
  console.log(`| keystroke echo p50 | ${f(results.echoMs.page)} ms | ${f(results.echoMs.sdk)} ms |`);
  console.log(`| download | ${f(results.downloadMBs.page)} MB/s | ${f(results.downloadMBs.harnessCp)} MB/s |`);
  console.log(`results: ${writeResults('browser.json', results)}`);
} finally {
  await browser.close();
  await stack.close();
  rmSync(dir, { recursive: true, force: true });
}
