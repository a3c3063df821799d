import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, BrowserContext, BrowserContextOptions, Page } from 'playwright-core';
import { waitUntil } from './helpers.js';
import { peerMarkerEnv, repoRoot } from './peer.js';
import { findProcesses } from './processes.js';

/**
 * Waits up to `graceMs` for every process carrying `marker` (`NAME=value` in its environment) to exit, then
 * SIGKILLs what is left and waits for that too: a browser's renderer, GPU and utility processes included.
 */
export async function reapChromium(marker: string, graceMs: number): Promise<void> {
  const left = () => findProcesses({ environIncludes: [marker] });
  try {
    await waitUntil(() => left().length === 0, 'chromium to exit', graceMs, 50);
  } catch {
    for (const p of left()) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    await waitUntil(() => left().length === 0, 'chromium to exit after SIGKILL', 5_000, 50);
  }
}

/** Debian's Chromium (`apt-get install chromium`; `.ci/run` installs it when missing), or `$TETHER_CHROMIUM`. */
export function chromiumPath(): string {
  return process.env.TETHER_CHROMIUM ?? '/usr/bin/chromium';
}

export function hasChromium(): boolean {
  return existsSync(chromiumPath());
}

/**
 * Where tests leave files for a person to look at (screenshots): `$TETHER_ARTIFACTS_DIR`, else
 * `<repo>/tests/artifacts` (git-ignored). Created on demand.
 */
export function artifactsDir(): string {
  const dir = process.env.TETHER_ARTIFACTS_DIR || join(repoRoot(), 'tests', 'artifacts');
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** Something a page did that a test should fail on. */
export interface PageProblem {
  /** `console`: a console.error (Chromium logs refused loads there too); `pageerror`: an uncaught exception or
   * unhandled rejection; `csp`: a `securitypolicyviolation` event; `crash`: the renderer died. */
  kind: 'console' | 'pageerror' | 'csp' | 'crash';
  text: string;
}

export interface TestPage {
  readonly page: Page;
  readonly context: BrowserContext;
  /** Every problem so far, in order (the array grows as the page runs). */
  readonly problems: PageProblem[];
  /** Every console message so far, `type: text` (for a failure's message). */
  readonly console: string[];
  /** Saves a full-page PNG as `artifactsDir()/name` and returns its path. */
  screenshot(name: string): Promise<string>;
  close(): Promise<void>;
}

export interface TestBrowser extends AsyncDisposable {
  readonly browser: Browser;
  /** The `NAME=value` environment entry every process of this browser carries (for `findProcesses`). */
  readonly processMarker: string;
  /** A page in a fresh context (its own storage): `options` as for `browser.newContext`. */
  newPage(options?: BrowserContextOptions): Promise<TestPage>;
  /** Closes the browser and waits until none of its processes is left (SIGKILL after 10 s). */
  close(): Promise<void>;
}

/** The binding the init script reports CSP violations through. */
const CSP_BINDING = '__tetherTestCspViolation';

/**
 * Runs in every frame before the page's own scripts (through the DevTools protocol, so the page's CSP does not
 * apply to it): forwards `securitypolicyviolation` events, which a page cannot see without listening itself.
 */
const REPORT_CSP_VIOLATIONS = `addEventListener('securitypolicyviolation', (e) => {
  globalThis[${JSON.stringify(CSP_BINDING)}]?.(
    e.effectiveDirective + ' blocked ' + (e.blockedURI || '(inline)') + ' at ' + e.sourceFile + ':' + e.lineNumber,
  );
}, true);`;

/**
 * Headless Chromium (`chromiumPath()`) through playwright-core, with `--no-sandbox` (CI runs as root). Its
 * processes carry the test-kit's peer marker, so a run's leak check sees any that outlive it.
 */
export async function startBrowser(options: { args?: string[] } = {}): Promise<TestBrowser> {
  const { chromium } = await import('playwright-core');
  const id = randomUUID();
  const marker = `TETHER_TEST_BROWSER=${id}`;
  const browser = await chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', ...(options.args ?? [])],
    env: { ...process.env, ...peerMarkerEnv(), TETHER_TEST_BROWSER: id },
  });
  const pages = new Set<TestPage>();
  let closed: Promise<void> | undefined;
  const close = () => {
    closed ??= (async () => {
      for (const page of [...pages]) await page.close().catch(() => undefined);
      await browser.close();
      await reapChromium(marker, 10_000);
    })();
    return closed;
  };
  return {
    browser,
    processMarker: marker,
    async newPage(contextOptions = {}) {
      const context = await browser.newContext(contextOptions);
      const problems: PageProblem[] = [];
      const consoleLines: string[] = [];
      await context.exposeBinding(CSP_BINDING, (_source, text: string) => {
        problems.push({ kind: 'csp', text });
      });
      await context.addInitScript({ content: REPORT_CSP_VIOLATIONS });
      const page = await context.newPage();
      page.on('console', (message) => {
        consoleLines.push(`${message.type()}: ${message.text()}`);
        if (message.type() === 'error') {
          const at = message.location().url;
          problems.push({ kind: 'console', text: at ? `${message.text()} (${at})` : message.text() });
        }
      });
      page.on('pageerror', (error) => problems.push({ kind: 'pageerror', text: error.stack ?? error.message }));
      page.on('crash', () => problems.push({ kind: 'crash', text: 'the page crashed' }));
      const testPage: TestPage = {
        page,
        context,
        problems,
        console: consoleLines,
        async screenshot(name) {
          const path = join(artifactsDir(), name);
          await page.screenshot({ path, fullPage: true });
          return path;
        },
        async close() {
          pages.delete(testPage);
          await context.close();
        },
      };
      pages.add(testPage);
      return testPage;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
