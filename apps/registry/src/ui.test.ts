/**
 * The browser UI under /ui: files, content types, no listing, no traversal, security headers.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildRegistry } from './app.js';
import { defaultUiCandidates, defaultUiDir, uiContentSecurityPolicy } from './routes/ui.js';
import { openSqliteStore, type RegistryStore } from './store/index.js';

const RELAYS = ['ws://127.0.0.1:1234', 'wss://relay.example:443/base', 'ws://127.0.0.1:1234/other'];
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
  "font-src 'self'; connect-src 'self' ws://127.0.0.1:1234 wss://relay.example; base-uri 'none'; " +
  "form-action 'none'; frame-ancestors 'none'";

let store: RegistryStore;
let app: FastifyInstance | undefined;
let base: string;
let dir: string;

async function build(ui: { dir: string | null } | undefined) {
  const pair = generateKeyPairSync('ed25519');
  app = await buildRegistry(
    { relayUrls: RELAYS, ...(ui ? { ui } : {}) },
    { store, signingKey: { privateKey: pair.privateKey, publicKey: pair.publicKey } },
  );
}

beforeEach(() => {
  store = openSqliteStore(':memory:');
  base = mkdtempSync(join(tmpdir(), 'registry-ui-'));
  dir = join(base, 'dist');
  mkdirSync(join(dir, 'assets', 'fonts'), { recursive: true });
  writeFileSync(join(dir, 'index.html'), '<!doctype html><title>tether</title>');
  writeFileSync(join(dir, 'app.js'), 'console.log(1)');
  writeFileSync(join(dir, 'app.css'), 'body{}');
  writeFileSync(join(dir, 'app.js.map'), '{}');
  writeFileSync(join(dir, 'assets', 'logo.svg'), '<svg/>');
  writeFileSync(join(dir, 'assets', 'logo.png'), Buffer.from([0x89, 0x50, 0x4e, 0x47]));
  writeFileSync(join(dir, 'assets', 'fonts', 'mono.woff2'), Buffer.from([1, 2, 3]));
  writeFileSync(join(dir, '.hidden'), 'secret');
  writeFileSync(join(base, 'secret.txt'), 'outside');
  symlinkSync(join(base, 'secret.txt'), join(dir, 'escape.txt'));
});

afterEach(async () => {
  await app?.close();
  app = undefined;
  await store.close();
  rmSync(base, { recursive: true, force: true });
});

function expectSecurityHeaders(headers: Record<string, unknown>) {
  expect(headers['content-security-policy']).toBe(CSP);
  expect(headers['x-content-type-options']).toBe('nosniff');
  expect(headers['referrer-policy']).toBe('no-referrer');
  expect(headers['cross-origin-opener-policy']).toBe('same-origin');
}

describe('/ui', () => {
  it("defaults to the first candidate holding an index.html: @tether/web's dist, else the monorepo's", () => {
    expect(defaultUiCandidates().at(-1)).toBe(join(import.meta.dirname, '..', '..', '..', 'packages', 'web', 'dist'));
    expect(defaultUiDir([join(base, 'none'), dir, base])).toBe(dir);
    expect(defaultUiDir([join(base, 'none'), base])).toBeNull();
  });

  it('builds the CSP from the relay origins', () => {
    expect(uiContentSecurityPolicy(RELAYS)).toBe(CSP);
  });

  it('redirects /ui to /ui/ and serves index.html there, not cached', async () => {
    await build({ dir });
    const redirect = await (app as FastifyInstance).inject({ method: 'GET', url: '/ui' });
    expect(redirect.statusCode).toBe(302);
    expect(redirect.headers.location).toBe('/ui/');
    expectSecurityHeaders(redirect.headers);
    const index = await (app as FastifyInstance).inject({ method: 'GET', url: '/ui/' });
    expect(index.statusCode).toBe(200);
    expect(index.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(index.headers['cache-control']).toBe('no-cache');
    expect(index.body).toBe('<!doctype html><title>tether</title>');
    expectSecurityHeaders(index.headers);
    const head = await (app as FastifyInstance).inject({ method: 'HEAD', url: '/ui/' });
    expect(head.statusCode).toBe(200);
    expect(head.body).toBe('');
  });

  it('redirects / to /ui/ when the page is served (GET and HEAD), keeping the query out', async () => {
    await build({ dir });
    for (const method of ['GET', 'HEAD'] as const) {
      for (const url of ['/', '/?x=1']) {
        const response = await (app as FastifyInstance).inject({ method, url });
        expect(response.statusCode, `${method} ${url}`).toBe(302);
        expect(response.headers.location, `${method} ${url}`).toBe('/ui/');
      }
    }
    // Only the root itself: other unknown paths stay the JSON 404.
    const other = await (app as FastifyInstance).inject({ method: 'GET', url: '/index.html' });
    expect(other.statusCode).toBe(404);
    expect(other.json().error.code).toBe('not_found');
  });

  it('keeps / a JSON 404 when no page is served (--no-ui, or no UI directory found)', async () => {
    for (const ui of [undefined, { dir: null }]) {
      await build(ui);
      const response = await (app as FastifyInstance).inject({ method: 'GET', url: '/' });
      expect(response.statusCode, JSON.stringify(ui)).toBe(404);
      expect(response.headers['content-type'], JSON.stringify(ui)).toMatch(/^application\/json/);
      expect(response.json().error.code, JSON.stringify(ui)).toBe('not_found');
      await app?.close();
      app = undefined;
    }
  });

  it('serves each file with its content type and the security headers', async () => {
    await build({ dir });
    const cases: Array<[string, string, string | Buffer]> = [
      ['/ui/index.html', 'text/html; charset=utf-8', '<!doctype html><title>tether</title>'],
      ['/ui/app.js', 'text/javascript; charset=utf-8', 'console.log(1)'],
      ['/ui/app.css', 'text/css; charset=utf-8', 'body{}'],
      ['/ui/app.js.map', 'application/json; charset=utf-8', '{}'],
      ['/ui/assets/logo.svg', 'image/svg+xml', '<svg/>'],
      ['/ui/assets/logo.png', 'image/png', Buffer.from([0x89, 0x50, 0x4e, 0x47])],
      ['/ui/assets/fonts/mono.woff2', 'font/woff2', Buffer.from([1, 2, 3])],
      ['/ui/app.js?v=1', 'text/javascript; charset=utf-8', 'console.log(1)'],
    ];
    for (const [url, type, body] of cases) {
      const response = await (app as FastifyInstance).inject({ method: 'GET', url });
      expect(response.statusCode, url).toBe(200);
      expect(response.headers['content-type'], url).toBe(type);
      expect(response.rawPayload.equals(Buffer.from(body)), url).toBe(true);
      expectSecurityHeaders(response.headers);
    }
  });

  it('lists no directory, serves no hidden file and nothing outside the directory', async () => {
    await build({ dir });
    const refused = [
      '/ui/assets',
      '/ui/assets/',
      '/ui/assets/fonts/',
      '/ui/.hidden',
      '/ui/missing.js',
      '/ui/../secret.txt',
      '/ui/..%2fsecret.txt',
      '/ui/%2e%2e/secret.txt',
      '/ui/%2e%2e%2fsecret.txt',
      '/ui/assets/..%2f..%2fsecret.txt',
      '/ui/assets/%2e%2e/%2e%2e/secret.txt',
      '/ui/..%5csecret.txt',
      '/ui/%2fetc%2fpasswd',
      '/ui//etc/passwd',
      '/ui/app.js%00.html',
      '/ui/escape.txt',
    ];
    for (const url of refused) {
      const response = await (app as FastifyInstance).inject({ method: 'GET', url });
      expect([400, 404], url).toContain(response.statusCode);
      expect(response.body, url).not.toContain('outside');
      expect(response.json().error.code, url).toMatch(/^(not_found|invalid_request)$/);
    }
    const missing = await (app as FastifyInstance).inject({ method: 'GET', url: '/ui/missing.js' });
    expectSecurityHeaders(missing.headers);
  });

  it('refuses traversal sent raw on the wire too (no client normalisation)', async () => {
    await build({ dir });
    await (app as FastifyInstance).listen({ host: '127.0.0.1', port: 0 });
    const { port } = (app as FastifyInstance).server.address() as { port: number };
    for (const path of ['/ui/../secret.txt', '/ui/assets/../../secret.txt', '/ui/%2e%2e/secret.txt']) {
      const { status, body } = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = httpRequest({ host: '127.0.0.1', port, path, method: 'GET' }, (res) => {
          let text = '';
          res.on('data', (chunk) => {
            text += chunk;
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
        });
        req.on('error', reject);
        req.end();
      });
      expect(status, path).toBe(404);
      expect(body, path).not.toContain('outside');
    }
  });

  it('answers 404 saying so when no UI directory was found', async () => {
    await build({ dir: null });
    const response = await (app as FastifyInstance).inject({ method: 'GET', url: '/ui/' });
    expect(response.statusCode).toBe(404);
    expect(response.json().error.message).toMatch(/not served by this registry/);
    expectSecurityHeaders(response.headers);
  });

  it('has no /ui routes without the ui option (--no-ui), and other routes get no UI headers', async () => {
    await build(undefined);
    const response = await (app as FastifyInstance).inject({ method: 'GET', url: '/ui/' });
    expect(response.statusCode).toBe(404);
    expect(response.json().error.code).toBe('not_found');
    expect(response.headers['content-security-policy']).toBeUndefined();
    await app?.close();
    await build({ dir });
    const health = await (app as FastifyInstance).inject({ method: 'GET', url: '/livez' });
    expect(health.headers['content-security-policy']).toBeUndefined();
  });
});
