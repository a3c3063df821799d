import { existsSync } from 'node:fs';
import { readFile, realpath, stat } from 'node:fs/promises';
import { dirname, extname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { errorBody } from '../errors.js';

/**
 * The browser terminal's static page under `/ui` (issue 21): a small hand-written handler rather than
 * @fastify/static (not in the store, and we need only GET of a few files from one directory, with no listing,
 * strict path checks and our own headers and error format).
 */

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.wasm': 'application/wasm',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * The page's Content-Security-Policy. `style-src 'unsafe-inline'` because xterm.js inserts `<style>` elements
 * (and style attributes) at run time; scripts stay `'self'` only. `connect-src` names the relay nodes: the page
 * opens its WebSocket to the node the registry's /connect answer names.
 */
export function uiContentSecurityPolicy(relayUrls: readonly string[]): string {
  const origins = [...new Set(relayUrls.map((url) => new URL(url).origin))];
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    `connect-src ${["'self'", ...origins].join(' ')}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/**
 * The default page directory: `dist` of the `@tether/web` package when it resolves from here (a dependency, as
 * in the `pnpm deploy` image), else `packages/web/dist` of the monorepo this file sits in; null when neither exists.
 */
export function defaultUiDir(candidates: readonly string[] = defaultUiCandidates()): string | null {
  return candidates.find((dir) => existsSync(join(dir, 'index.html'))) ?? null;
}

/** Where defaultUiDir looks, in order. */
export function defaultUiCandidates(): string[] {
  const candidates: string[] = [];
  try {
    candidates.push(join(dirname(fileURLToPath(import.meta.resolve('@tether/web/package.json'))), 'dist'));
  } catch {
    // not a dependency (yet): the monorepo layout below
  }
  // apps/registry/{src,dist}/routes/ui.(ts|js) → packages/web/dist
  candidates.push(fileURLToPath(new URL('../../../../packages/web/dist', import.meta.url)));
  return candidates;
}

export interface UiOptions {
  /** The directory served, or null: /ui answers 404 ui_not_served. */
  dir: string | null;
  relayUrls: readonly string[];
}

/** A path segment we refuse: empty, `.`/`..`, hidden, or holding a separator, backslash or NUL. */
const badSegment = (segment: string) =>
  segment === '' || segment.startsWith('.') || /[\\/\0]/.test(segment) || segment.includes(':');

/** Registers `/ui` and `/ui/*` (GET and HEAD), and `/` as a redirect to `/ui/` when a page is served. */
export async function uiRoutes(app: FastifyInstance, options: UiOptions) {
  const csp = uiContentSecurityPolicy(options.relayUrls);
  const root = options.dir === null ? null : await realpath(options.dir).catch(() => null);
  const notFound = (reply: FastifyReply) => reply.code(404).send(errorBody('not_found', 'no such file'));

  app.addHook('onSend', async (_request, reply, payload) => {
    reply.header('content-security-policy', csp);
    reply.header('x-content-type-options', 'nosniff');
    reply.header('referrer-policy', 'no-referrer');
    reply.header('cross-origin-opener-policy', 'same-origin');
    return payload;
  });

  app.get('/ui', async (_request, reply) => reply.redirect('/ui/', 302));
  // The registry's own address, opened in a browser, leads to the page when there is one (302, not 308: a
  // registry restarted without it must not stay redirected in the browser's cache); otherwise `/` stays the
  // JSON 404 of any unknown path.
  if (root !== null) app.get('/', async (_request, reply) => reply.redirect('/ui/', 302));

  app.get<{ Params: { '*': string } }>('/ui/*', async (request, reply) => {
    if (root === null) {
      return reply
        .code(404)
        .send(errorBody('not_found', 'the browser UI is not served by this registry (see `registry serve --ui-dir`)'));
    }
    // The raw path, decoded here once: a percent-encoded `/`, `\`, `.` or NUL cannot hide a traversal.
    const rawPath = (request.raw.url ?? '').split('?')[0] as string;
    let relative: string;
    try {
      relative = decodeURIComponent(rawPath.slice('/ui/'.length));
    } catch {
      return notFound(reply);
    }
    if (relative === '') relative = 'index.html';
    const segments = relative.split('/');
    if (segments.some(badSegment)) return notFound(reply);
    let file: string;
    try {
      file = await realpath(join(root, ...segments));
    } catch {
      return notFound(reply);
    }
    // A symlink out of the directory is refused too.
    if (!file.startsWith(root + sep)) return notFound(reply);
    const info = await stat(file).catch(() => null);
    if (!info?.isFile()) return notFound(reply);
    const body = await readFile(file);
    const type = CONTENT_TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream';
    reply.header('content-type', type);
    // index.html names the (possibly rebuilt) assets: always revalidated; assets too, as their names carry no hash.
    reply.header('cache-control', 'no-cache');
    return reply.send(body);
  });
}
