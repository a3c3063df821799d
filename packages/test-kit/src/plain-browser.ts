import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { chromiumPath, reapChromium } from './browser.js';
import { waitUntil } from './helpers.js';
import { peerMarkerEnv } from './peer.js';

/**
 * One page in headless Chromium with nothing attached but the DevTools protocol's Runtime domain: a page timed
 * as a person's browser runs it. playwright enables the Network domain, and Chromium then copies every
 * WebSocket frame into a DevTools event for it: on this machine a plain page receives ~775 MB/s of WebSocket
 * messages, one under playwright ~135 MB/s. Benchmarks time throughput here; tests use `startBrowser`.
 */
export interface PlainPage extends AsyncDisposable {
  /** The `NAME=value` environment entry every process of this browser carries (for `findProcesses`). */
  readonly processMarker: string;
  /** Evaluates `expression` in the page (a promise is awaited) and returns its value as JSON would carry it. */
  evaluate<T>(expression: string): Promise<T>;
  /** Loads `url` as a new document and waits until it has loaded. */
  goto(url: string): Promise<void>;
  /** Closes the browser and waits until none of its processes is left (SIGKILL after 5 s); removes its profile. */
  close(): Promise<void>;
}

interface CdpAnswer {
  id: number;
  result?: {
    result?: { value?: unknown };
    exceptionDetails?: { text?: string; exception?: { description?: string } };
    /** Page.navigate's answer when the address could not be loaded. */
    errorText?: string;
  };
  error?: { message: string };
}

/** Starts Chromium (`chromiumPath()`) on about:blank, downloads refused, and attaches to its page. */
export async function startPlainChromium(options: { args?: string[] } = {}): Promise<PlainPage> {
  const profile = mkdtempSync(join(tmpdir(), 'tether-plain-chromium-'));
  const id = randomUUID();
  const marker = `TETHER_TEST_BROWSER=${id}`;
  let child: ChildProcess | undefined;
  const sockets: WebSocket[] = [];
  let closed: Promise<void> | undefined;
  const close = () => {
    closed ??= (async () => {
      for (const socket of sockets) socket.close();
      if (child && child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child!.once('exit', resolve));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child?.kill('SIGKILL'), 5_000);
        // Bounded even if no exit is ever reported (the reaper below still kills what is left).
        let giveUp: NodeJS.Timeout | undefined;
        await Promise.race([exited, new Promise((resolve) => (giveUp = setTimeout(resolve, 10_000)))]);
        clearTimeout(timer);
        clearTimeout(giveUp);
      }
      // Its renderer, GPU and utility processes follow the browser process; any that do not are killed.
      await reapChromium(marker, 5_000);
      rmSync(profile, { recursive: true, force: true });
    })();
    return closed;
  };
  try {
    child = spawn(
      chromiumPath(),
      [
        '--headless=new',
        '--no-sandbox',
        '--disable-dev-shm-usage',
        '--remote-debugging-port=0',
        `--user-data-dir=${profile}`,
        ...(options.args ?? []),
        'about:blank',
      ],
      { stdio: 'ignore', env: { ...process.env, ...peerMarkerEnv(), TETHER_TEST_BROWSER: id } },
    );
    let spawnError: Error | undefined;
    child.once('error', (err) => {
      spawnError = err;
    });
    const portFile = join(profile, 'DevToolsActivePort');
    await waitUntil(
      () => {
        if (spawnError) throw new Error(`cannot start chromium (${chromiumPath()}): ${spawnError.message}`);
        if (child!.exitCode !== null || child!.signalCode !== null) throw new Error('chromium exited at start');
        return existsSync(portFile) && readFileSync(portFile, 'utf8').includes('\n');
      },
      'chromium to open its DevTools port',
      15_000,
      50,
    );
    const port = readFileSync(portFile, 'utf8').split('\n')[0];
    const version = (await (await fetch(`http://127.0.0.1:${port}/json/version`)).json()) as {
      webSocketDebuggerUrl: string;
    };
    const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as Array<{
      type: string;
      webSocketDebuggerUrl: string;
    }>;
    const target = targets.find((t) => t.type === 'page');
    if (!target) throw new Error('chromium has no page to attach to');
    const connect = async (url: string) => {
      const socket = new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 });
      sockets.push(socket);
      await new Promise<void>((resolve, reject) => {
        socket.once('open', () => resolve());
        socket.once('error', reject);
      });
      let nextId = 0;
      const pending = new Map<number, (answer: CdpAnswer) => void>();
      socket.on('message', (data) => {
        const answer = JSON.parse(data.toString()) as CdpAnswer;
        pending.get(answer.id)?.(answer);
        pending.delete(answer.id);
      });
      socket.on('close', () => {
        for (const settle of pending.values()) settle({ id: -1, error: { message: 'DevTools connection closed' } });
        pending.clear();
      });
      return (method: string, params: object = {}) =>
        new Promise<CdpAnswer>((resolve) => {
          const id = ++nextId;
          pending.set(id, resolve);
          socket.send(JSON.stringify({ id, method, params }));
        }).then((answer) => {
          if (answer.error) throw new Error(`${method}: ${answer.error.message}`);
          return answer;
        });
    };
    const browserCall = await connect(version.webSocketDebuggerUrl);
    await browserCall('Browser.setDownloadBehavior', { behavior: 'deny' });
    const pageCall = await connect(target.webSocketDebuggerUrl);
    await pageCall('Page.enable');
    const evaluate = async <T>(expression: string): Promise<T> => {
      const answer = await pageCall('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
      const thrown = answer.result?.exceptionDetails;
      if (thrown) throw new Error(`in the page: ${thrown.exception?.description ?? thrown.text ?? 'an exception'}`);
      return answer.result?.result?.value as T;
    };
    return {
      processMarker: marker,
      evaluate,
      async goto(url) {
        // Through about:blank, so that the target is always a new document (a page may rewrite its own
        // address once loaded, as /ui does with a grant, and a fragment-only change would load nothing).
        const loaded = async (what: string, check: string) =>
          waitUntil(async () => (await evaluate<boolean>(check)) === true, what, 15_000, 50);
        await pageCall('Page.navigate', { url: 'about:blank' });
        await loaded('about:blank', `location.href === 'about:blank'`);
        const navigated = await pageCall('Page.navigate', { url });
        if (navigated.result?.errorText) throw new Error(`cannot load ${url}: ${navigated.result.errorText}`);
        await loaded(`${url} to load`, `location.href !== 'about:blank' && document.readyState === 'complete'`);
      },
      close,
      [Symbol.asyncDispose]: close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
