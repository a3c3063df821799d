/**
 * The browser terminal's figures, in Debian's Chromium against the registry, relay and executor bins: keystroke
 * echo (the time from a key to the next output, measured in the page) next to the Node SDK's over the same
 * stack, and a download into the page (1 MiB blocks; records opened by WebCrypto's AES-GCM, and from an executor
 * on the ChaChaPoly suite in JavaScript; the file's SHA-256 checked against the executor's and this file's) next
 * to `harness cp` of the same file. Medians.
 *
 * The echo is timed in a page driven by playwright (it types the keys). The download is timed in a plain
 * Chromium (`startPlainChromium`): under playwright, Chromium copies every WebSocket frame into a DevTools
 * event, which caps a page's WebSocket input at about a sixth of a plain browser's on this machine.
 *
 *   pnpm --filter @tether/bench run bench:browser
 *   (BENCH_BROWSER_KEYS, default 60; BENCH_BROWSER_MIB, default 32; BENCH_BROWSER_REPEATS, default 3)
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Environment } from '@tether/client';
import { type PlainPage, repoRoot, startBrowser, startPlainChromium, startStack } from '@tether/test-kit';
import { harnessEnv, harnessMain, median, timed, writeResults } from './commands.js';

const KEYS = Number(process.env.BENCH_BROWSER_KEYS ?? 60);
const MIB = Number(process.env.BENCH_BROWSER_MIB ?? 32);
const REPEATS = Number(process.env.BENCH_BROWSER_REPEATS ?? 3);
const ENVIRONMENT = 'bench-browser';
/** Served by an executor on the ChaChaPoly suite. */
const CHACHA_ENVIRONMENT = 'bench-browser-chacha';
const KEY_GAP_MS = 50;

interface PageHook {
  state(): string;
  echoLatencies(): number[];
  transfers(): Array<{
    direction: string;
    state: string;
    bytes: number;
    elapsedMs: number | null;
    sha256: string | null;
    verified: boolean;
    error?: string;
  }>;
}
declare const tether: PageHook;

const dir = mkdtempSync(join(tmpdir(), 'tether-bench-browser-'));
const stack = await startStack({ registryArgs: ['--ui-dir', join(repoRoot(), 'packages', 'web', 'dist')] });
const browser = await startBrowser();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
try {
  await stack.startExecutor('tether', ENVIRONMENT);
  await stack.startExecutor('tether', CHACHA_ENVIRONMENT, { args: ['--noise-cipher', 'chachapoly'] });
  const file = join(dir, 'payload.bin');
  const content = randomBytes(MIB * 1024 * 1024);
  writeFileSync(file, content);
  const contentSha256 = createHash('sha256').update(content).digest('hex');

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

  const pageMBs: number[] = [];
  const chachaMBs: number[] = [];
  const uploadMBs: number[] = [];
  const cpMBs: number[] = [];
  const bytes = MIB * 1024 * 1024;
  const env = harnessEnv(stack, ENVIRONMENT);
  await browser.close();

  /** A plain Chromium signed in to `environment` with the harness key. */
  const signedIn = async (environment: string): Promise<PlainPage> => {
    const plain = await startPlainChromium();
    try {
      await plain.goto(`${stack.registryUrl}/ui/#env=${environment}`);
      await plain.evaluate(`(document.getElementById('api-key').value = ${JSON.stringify(stack.keys.harness)},
        document.getElementById('connect').click())`);
      await plain.evaluate(`new Promise((resolve, reject) => {
        const deadline = Date.now() + 20000;
        const poll = () => tether.state() === 'connected' ? resolve(true)
          : Date.now() > deadline ? reject(new Error('not connected: ' + tether.state())) : setTimeout(poll, 20);
        poll();
      })`);
      return plain;
    } catch (err) {
      await plain.close();
      throw err;
    }
  };
  /** Runs `prepare` then `start` in the page, and answers the transfer `start` began once it has ended. */
  const transfer = (plain: PlainPage, prepare: string, start: string) =>
    plain.evaluate<ReturnType<PageHook['transfers']>[number]>(`new Promise((resolve) => {
      ${prepare}
      const before = tether.transfers().length;
      ${start}
      const poll = () => {
        const all = tether.transfers();
        const t = all[all.length - 1];
        if (all.length > before && t.state !== 'running') resolve(t);
        else setTimeout(poll, 5);
      };
      poll();
    })`);
  /**
   * One upload from `plain` of MIB random bytes made in the page, into `dir`: checked against the executor's
   * digest by the page and against the file written here; MB/s as the page timed it.
   */
  const upload = async (plain: PlainPage, name: string): Promise<number> => {
    const last = await transfer(
      plain,
      `const bytes = new Uint8Array(${bytes});
      for (let at = 0; at < bytes.length; at += 65536) crypto.getRandomValues(bytes.subarray(at, at + 65536));
      const picker = document.getElementById('upload');
      const chosen = new DataTransfer();
      chosen.items.add(new File([bytes], ${JSON.stringify(name)}));
      document.getElementById('remote-dir').value = ${JSON.stringify(dir)};`,
      `picker.files = chosen.files;
      picker.dispatchEvent(new Event('change'));`,
    );
    const written = join(dir, name);
    if (last.state !== 'done' || last.bytes !== bytes || last.elapsedMs === null || !last.verified) {
      throw new Error(`the page's upload did not finish whole: ${JSON.stringify(last)}`);
    }
    if (createHash('sha256').update(readFileSync(written)).digest('hex') !== last.sha256) {
      throw new Error('the uploaded file is not what the page sent');
    }
    rmSync(written);
    return bytes / 1e6 / (last.elapsedMs / 1000);
  };
  /** One download of the file into `plain`, checked whole, in MB/s as the page timed it. */
  const download = async (plain: PlainPage): Promise<number> => {
    const last = await transfer(
      plain,
      `document.getElementById('download-path').value = ${JSON.stringify(file)};`,
      `document.getElementById('download').click();`,
    );
    if (last.state !== 'done' || last.bytes !== bytes || last.elapsedMs === null) {
      throw new Error(`the page's download did not finish whole: ${JSON.stringify(last)}`);
    }
    if (last.sha256 !== contentSha256 || !last.verified) {
      throw new Error(`the page's download is not the file: ${JSON.stringify(last)}`);
    }
    return bytes / 1e6 / (last.elapsedMs / 1000);
  };

  // Downloads into plain pages (AES-GCM by WebCrypto; ChaChaPoly in JavaScript) and with harness cp, in turn.
  const aesPage = await signedIn(ENVIRONMENT);
  try {
    const chachaPage = await signedIn(CHACHA_ENVIRONMENT);
    try {
      for (let r = 0; r < REPEATS; r++) {
        pageMBs.push(await download(aesPage));
        uploadMBs.push(await upload(aesPage, `up-${r}.bin`));
        chachaMBs.push(await download(chachaPage));
        const copy = join(dir, `cp-${r}.bin`);
        const seconds = await timed(process.execPath, [harnessMain(), 'cp', `${ENVIRONMENT}:${file}`, copy], env);
        if (createHash('sha256').update(readFileSync(copy)).digest('hex') !== contentSha256) {
          throw new Error('harness cp did not copy the file whole');
        }
        rmSync(copy);
        cpMBs.push(bytes / 1e6 / seconds);
      }
    } finally {
      await chachaPage.close();
    }
  } finally {
    await aesPage.close();
  }

  const results = {
    keys: KEYS,
    mib: MIB,
    repeats: REPEATS,
    echoMs: { page: median(pageEcho), sdk: median(sdkEcho) },
    downloadMBs: { page: median(pageMBs), pageChaChaPoly: median(chachaMBs), harnessCp: median(cpMBs) },
    uploadMBs: { page: median(uploadMBs) },
    samples: { pageEcho, sdkEcho, pageMBs, chachaMBs, cpMBs, uploadMBs },
  };
  const f = (n: number) => n.toFixed(1);
  console.log(`| ${KEYS} keys, ${MIB} MiB ×${REPEATS} | page (Chromium) | Node SDK / harness cp |`);
  console.log('|---|---|---|');
  console.log(`| keystroke echo p50 | ${f(results.echoMs.page)} ms | ${f(results.echoMs.sdk)} ms |`);
  console.log(`| download, AES-GCM | ${f(results.downloadMBs.page)} MB/s | ${f(results.downloadMBs.harnessCp)} MB/s |`);
  console.log(`| download, ChaChaPoly | ${f(results.downloadMBs.pageChaChaPoly)} MB/s | |`);
  console.log(`| upload, AES-GCM | ${f(results.uploadMBs.page)} MB/s | |`);
  console.log(`results: ${writeResults('browser.json', results)}`);
} finally {
  await browser.close();
  await stack.close();
  rmSync(dir, { recursive: true, force: true });
}
