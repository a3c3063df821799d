import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { artifactsDir, hasChromium, startBrowser } from './browser.js';
import { startPlainChromium } from './plain-browser.js';
import { findProcesses } from './processes.js';

const PAGES: Record<string, { type: string; body: string }> = {
  '/clean': { type: 'text/html', body: '<!doctype html><title>clean</title><p id="ok">fine</p>' },
  // The inline script breaks the CSP; app.js (allowed) logs an error and throws.
  '/bad': {
    type: 'text/html',
    body: '<!doctype html><title>bad</title><script>document.title = "inline ran"</script><script src="/app.js"></script>',
  },
  '/app.js': {
    type: 'text/javascript',
    body: 'console.error("boom-console"); setTimeout(() => { throw new Error("boom-uncaught"); }, 0);',
  },
};

const server = createServer((req, res) => {
  if (req.url === '/favicon.ico') {
    res.writeHead(204).end();
    return;
  }
  const page = PAGES[req.url ?? ''];
  if (!page) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, {
    'content-type': page.type,
    'content-security-policy': "default-src 'self'; script-src 'self'",
  });
  res.end(page.body);
});
let base = '';
const artifacts = mkdtempSync(join(tmpdir(), 'tether-artifacts-'));

beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  rmSync(artifacts, { recursive: true, force: true });
});

describe('startBrowser', () => {
  it('is installed here (CI installs Debian chromium)', () => {
    expect(hasChromium()).toBe(true);
  });

  it('reports console errors, uncaught errors and CSP violations; a clean page reports none', async () => {
    const browser = await startBrowser();
    try {
      const clean = await browser.newPage();
      await clean.page.goto(`${base}/clean`);
      expect(await clean.page.textContent('#ok')).toBe('fine');
      expect(clean.problems).toEqual([]);

      const bad = await browser.newPage();
      await bad.page.goto(`${base}/bad`);
      await expect
        .poll(() => bad.problems.map((p) => p.kind).sort(), { timeout: 10_000 })
        .toEqual(expect.arrayContaining(['console', 'csp', 'pageerror']));
      expect(await bad.page.title()).toBe('bad');
      expect(bad.problems.find((p) => p.kind === 'csp')?.text).toMatch(/^script-src(-elem)? blocked inline/);
      expect(bad.problems.find((p) => p.kind === 'pageerror')?.text).toContain('boom-uncaught');
      expect(bad.problems.some((p) => p.kind === 'console' && p.text.startsWith('boom-console ('))).toBe(true);
    } finally {
      await browser.close();
    }
  }, 60_000);

  it('saves screenshots in $TETHER_ARTIFACTS_DIR, and close() leaves no chromium process', async () => {
    const before = process.env.TETHER_ARTIFACTS_DIR;
    process.env.TETHER_ARTIFACTS_DIR = join(artifacts, 'sub');
    const browser = await startBrowser();
    try {
      expect(findProcesses({ environIncludes: [browser.processMarker] }).length).toBeGreaterThan(0);
      const tab = await browser.newPage({ viewport: { width: 320, height: 200 } });
      await tab.page.goto(`${base}/clean`);
      const path = await tab.screenshot('clean.png');
      expect(path).toBe(join(artifacts, 'sub', 'clean.png'));
      expect(artifactsDir()).toBe(join(artifacts, 'sub'));
      expect(readFileSync(path).subarray(1, 4).toString()).toBe('PNG');
    } finally {
      if (before === undefined) delete process.env.TETHER_ARTIFACTS_DIR;
      else process.env.TETHER_ARTIFACTS_DIR = before;
      await browser.close();
    }
    expect(findProcesses({ environIncludes: [browser.processMarker] })).toEqual([]);
    expect(existsSync(join(artifacts, 'sub', 'clean.png'))).toBe(true);
  }, 60_000);
});

describe('startPlainChromium', () => {
  it('evaluates in a page with nothing but DevTools Runtime attached, and close() leaves no process', async () => {
    const plain = await startPlainChromium();
    try {
      expect(findProcesses({ environIncludes: [plain.processMarker] }).length).toBeGreaterThan(0);
      await plain.goto(`${base}/clean`);
      expect(await plain.evaluate<string>(`document.getElementById('ok').textContent`)).toBe('fine');
      expect(await plain.evaluate<number>('new Promise((resolve) => setTimeout(() => resolve(6 * 7), 10))')).toBe(42);
      await expect(plain.evaluate('Promise.reject(new Error("boom-evaluate"))')).rejects.toThrow(/boom-evaluate/);
      await expect(plain.evaluate('nope.nope')).rejects.toThrow(/nope is not defined/);
      // An address nothing answers at: goto says so instead of waiting for a load that never comes.
      const gone = createServer();
      await new Promise<void>((resolve) => gone.listen(0, '127.0.0.1', resolve));
      const port = (gone.address() as AddressInfo).port;
      await new Promise((resolve) => gone.close(resolve));
      await expect(plain.goto(`http://127.0.0.1:${port}/`)).rejects.toThrow(/cannot load .*ERR_CONNECTION_REFUSED/);
    } finally {
      await plain.close();
    }
    expect(findProcesses({ environIncludes: [plain.processMarker] })).toEqual([]);
  }, 60_000);

  it('fails to start with the reason when the binary cannot be run, leaving no profile behind', async () => {
    const before = process.env.TETHER_CHROMIUM;
    process.env.TETHER_CHROMIUM = join(tmpdir(), 'no-such-chromium-here');
    const profiles = () => readdirSync(tmpdir()).filter((name) => name.startsWith('tether-plain-chromium-'));
    const had = profiles();
    try {
      await expect(startPlainChromium()).rejects.toThrow(/cannot start chromium .*ENOENT/);
    } finally {
      if (before === undefined) delete process.env.TETHER_CHROMIUM;
      else process.env.TETHER_CHROMIUM = before;
    }
    expect(profiles().filter((name) => !had.includes(name))).toEqual([]);
  });
});
