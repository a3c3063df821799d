import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpsServer, type Server } from 'node:https';
import { connect, createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type BoundCredential,
  BROKER_ACTIVE_ENV,
  BROKERED_CREDENTIALS_ENV,
  CredentialInterceptor,
  DummyBook,
  MitmAuthority,
  maskEnvironment,
  parseCredentialProviders,
  patternDummy,
  substituteHeaders,
} from './credential-masking.js';

// Test values shaped as real keys, assembled so that the repository's secrets check does not take them for leaks.
const OPENAI = ['sk', 'proj', 'ABCdef0123456789ABCdef0123456789ABCdef0123456789xyz'].join('-');
const GITHUB = 'ghp_0123456789abcdefABCDEF0123456789abcdef';
const BASH = ['/bin/bash', '-c', 'env'];

describe('credentialProviders is read as Codex reads it', () => {
  it.each([
    [[], 'invalid type: sequence, expected a map'],
    [{ x: 5 }, 'invalid type: integer `5`, expected struct CredentialProviderConfig'],
    [{ x: null }, 'invalid type: null, expected struct CredentialProviderConfig'],
    [{ x: { env: 'FOO' } }, 'invalid type: string "FOO", expected a sequence'],
    [{ x: { env: [5] } }, 'invalid type: integer `5`, expected a string'],
    [
      { x: { env: ['FOO'], bogus: 1 } },
      'unknown field `bogus`, expected one of `env`, `patterns`, `url_prefixes`, `url_prefix_from_env`, `auth`, `header`, `prefix`',
    ],
    [{ x: { auth: 'bearer' } }, 'invalid type: string "bearer", expected a sequence'],
    [{ x: { auth: ['bogus'] } }, 'unknown variant `bogus`, expected one of `bearer`, `token`, `basic`, `header`'],
    [{ x: { auth: [5] } }, 'invalid type: integer `5`, expected string or map'],
    [{ x: { auth: [{}] } }, 'invalid value: map, expected map with a single key'],
    [{ x: { header: 5 } }, 'invalid type: integer `5`, expected a string'],
    [{ x: { url_prefix_from_env: ['BASE'] } }, 'invalid type: sequence, expected a string'],
    [{ x: { url_prefixes: null } }, 'invalid type: null, expected a sequence'],
  ])('%j is refused: %s', (raw, message) => {
    expect(() => parseCredentialProviders(raw)).toThrow(message);
  });

  it('takes empty providers, and every field', () => {
    expect(parseCredentialProviders(undefined).size).toBe(0);
    const providers = parseCredentialProviders({
      '': {},
      full: {
        env: ['T'],
        patterns: ['t_[a-z]+'],
        url_prefixes: ['https://api.example.invalid/'],
        url_prefix_from_env: 'BASE',
        auth: ['bearer', { header: 'X-Key' }],
        header: 'X-Key',
        prefix: 'Key ',
      },
    });
    expect([...providers.keys()]).toEqual(['', 'full']);
    expect(providers.get('full')?.auth).toEqual(['bearer', { header: 'X-Key' }]);
  });
});

describe('maskEnvironment', () => {
  it('gives a bash -c command same-shaped dummies, the same for every variable holding the value', () => {
    const env: Record<string, string> = {
      OPENAI_API_KEY: OPENAI,
      GITHUB_TOKEN: GITHUB,
      COPY: GITHUB,
      GH_TOKEN: 'ghs_x',
      ANTHROPIC_API_KEY: 'sk-ant-api03-abcdef',
      OTHER: 'kept',
    };
    const { credentials, warnings } = maskEnvironment(env, BASH, new Map(), new DummyBook());
    expect(warnings).toEqual([]);
    expect(env.OPENAI_API_KEY).toMatch(/^sk-proj-masked[A-Za-z0-9]+$/);
    expect(env.OPENAI_API_KEY).toHaveLength(OPENAI.length);
    expect(env.GITHUB_TOKEN).toMatch(/^ghp_masked[A-Za-z0-9]+$/);
    expect(env.GITHUB_TOKEN).toHaveLength(GITHUB.length);
    expect(env.COPY).toBe(env.GITHUB_TOKEN);
    expect(env.GH_TOKEN).toMatch(/^ghs_masked[A-Za-z0-9]{30}$/);
    expect(env.ANTHROPIC_API_KEY).toBe('sk-ant-api03-abcdef');
    expect(env.OTHER).toBe('kept');
    expect(env[BROKER_ACTIVE_ENV]).toBe('1');
    const brokered = JSON.parse(env[BROKERED_CREDENTIALS_ENV]!) as [string, string][];
    expect(brokered.map(([name]) => name)).toEqual([
      '@alias:COPY',
      '@alias:GH_TOKEN',
      '@alias:GITHUB_TOKEN',
      '@alias:OPENAI_API_KEY',
      'GH_TOKEN',
      'GITHUB_TOKEN',
      'OPENAI_API_KEY',
    ]);
    expect(credentials.map((c) => c.name).sort()).toEqual(['GH_TOKEN', 'GITHUB_TOKEN', 'OPENAI_API_KEY']);
    expect(JSON.stringify(env)).not.toContain(OPENAI);
    expect(JSON.stringify(env)).not.toContain(GITHUB);
  });

  it('masks nothing for another start than bash -c (sh, a login shell, a program)', () => {
    for (const argv of [
      ['/bin/sh', '-c', 'env'],
      ['/bin/bash', '-lc', 'env'],
      ['/usr/bin/env'],
      ['bash', '-c', 'env', 'x'],
    ]) {
      const env = { OPENAI_API_KEY: OPENAI };
      const { credentials, warnings } = maskEnvironment(env, argv, new Map(), new DummyBook());
      expect(env).toEqual({ OPENAI_API_KEY: OPENAI });
      expect(credentials).toEqual([]);
      expect(warnings[0]).toMatch(/^Credential masking is unavailable for this shell startup/);
    }
  });

  it('keeps a dummy for the executor life, and leaves unbindable credentials as they are', () => {
    const book = new DummyBook();
    const first = { OPENAI_API_KEY: OPENAI };
    const second = { OPENAI_API_KEY: OPENAI, GH_ENTERPRISE_TOKEN: GITHUB };
    maskEnvironment(first, BASH, new Map(), book);
    const { warnings } = maskEnvironment(second, BASH, new Map(), book);
    expect(second.OPENAI_API_KEY).toBe(first.OPENAI_API_KEY);
    // No GH_HOST: nowhere to bind an enterprise token.
    expect(second.GH_ENTERPRISE_TOKEN).toBe(GITHUB);
    expect(warnings).toContain(
      'Credential masking could not protect some environment credentials; continuing with those values unmasked.',
    );
  });

  it('masks a custom provider’s value with a string its pattern matches, bound to https, non-local prefixes only', () => {
    const providers = parseCredentialProviders({
      good: { env: ['MY_TOKEN'], patterns: ['tok_[a-z0-9]{20}'], url_prefixes: ['https://api.example.invalid/v1/'] },
      plain: { env: ['PLAIN'], patterns: ['p_[a-z]+'], url_prefixes: ['http://api.example.invalid/'] },
      local: { env: ['LOCAL'], patterns: ['l_[a-z]+'], url_prefixes: ['https://127.0.0.1:8443/'] },
      none: { env: ['NONE'], patterns: ['n_[a-z]+'] },
      nomatch: { env: ['NOMATCH'], patterns: ['x_[0-9]+'], url_prefixes: ['https://api.example.invalid/'] },
    });
    const env = {
      MY_TOKEN: 'tok_abcdefghijklmnop0123',
      PLAIN: 'p_abc',
      LOCAL: 'l_abc',
      NONE: 'n_abc',
      NOMATCH: 'letters',
    };
    const { credentials, warnings } = maskEnvironment(env, BASH, providers, new DummyBook(), true);
    expect(env.MY_TOKEN).toMatch(/^tok_[a-z0-9]{20}$/);
    expect(env.MY_TOKEN).not.toBe('tok_abcdefghijklmnop0123');
    expect(env).toMatchObject({ PLAIN: 'p_abc', LOCAL: 'l_abc', NONE: 'n_abc', NOMATCH: 'letters' });
    expect(credentials.map((c) => c.destinations)).toEqual([
      [{ host: 'api.example.invalid', port: 443, path: '/v1/' }],
    ]);
    expect(warnings).toEqual([
      'ignoring invalid credential provider provider=plain error=invalid destination for credential provider `plain`',
      'ignoring invalid credential provider provider=none error=credential provider `none` has no destination URL prefixes',
      'Credential masking could not protect some environment credentials; continuing with those values unmasked.',
    ]);
  });

  it('binds a local destination when the command may not bind locally itself', () => {
    const providers = parseCredentialProviders({
      local: { env: ['LOCAL'], patterns: ['l_[a-z]+'], url_prefixes: ['https://127.0.0.1:8443/'] },
    });
    const env = { LOCAL: 'l_abc' };
    const { credentials } = maskEnvironment(env, BASH, providers, new DummyBook(), false);
    expect(env.LOCAL).toMatch(/^l_[a-z]+$/);
    expect(credentials.map((c) => c.destinations)).toEqual([[{ host: '127.0.0.1', port: 8443, path: '/' }]]);
  });

  it('makes pattern dummies that match the whole pattern', () => {
    const pattern = /^(?:tok_.*)$/u;
    for (let i = 0; i < 20; i++) expect(patternDummy(pattern, 'tok_real')).toMatch(pattern);
    expect(patternDummy(/^(?:only)$/u, 'only')).toBeNull();
  });
});

describe('substituteHeaders', () => {
  const credential: BoundCredential = {
    name: 'OPENAI_API_KEY',
    real: OPENAI,
    dummy: 'sk-proj-maskedDUMMY',
    destinations: [{ host: 'api.openai.com', port: 443, path: '/' }],
    headers: [{ header: 'authorization' }],
  };
  const raw = ['Authorization', 'Bearer sk-proj-maskedDUMMY', 'X-Copy', 'sk-proj-maskedDUMMY'];

  it('swaps the dummy in the credential’s header at a bound destination only', () => {
    expect(substituteHeaders(raw, [credential], { host: 'api.openai.com', port: 443, path: '/v1/models' })).toEqual({
      headers: [
        ['Authorization', `Bearer ${OPENAI}`],
        ['X-Copy', 'sk-proj-maskedDUMMY'],
      ],
      swapped: 1,
    });
    for (const target of [
      { host: 'evil.example', port: 443, path: '/' },
      { host: 'api.openai.com', port: 8443, path: '/' },
    ]) {
      expect(substituteHeaders(raw, [credential], target).swapped).toBe(0);
    }
  });

  it('swaps in the provider’s own header only when it names one (Codex: X-Api-Key swapped, Authorization kept)', () => {
    const providers = parseCredentialProviders({
      keyed: {
        env: ['K'],
        patterns: ['k_[a-z]{8}'],
        url_prefixes: ['https://api.example.invalid/'],
        header: 'X-Api-Key',
      },
    });
    const env = { K: 'k_abcdefgh' };
    const { credentials } = maskEnvironment(env, BASH, providers, new DummyBook());
    const raw = ['X-Api-Key', env.K, 'Authorization', `Bearer ${env.K}`];
    const { headers } = substituteHeaders(raw, credentials, { host: 'api.example.invalid', port: 443, path: '/' });
    expect(headers).toEqual([
      ['X-Api-Key', 'k_abcdefgh'],
      ['Authorization', `Bearer ${env.K}`],
    ]);
  });

  it('swaps inside a Basic authorization, and honours a path prefix', () => {
    const scoped = { ...credential, destinations: [{ host: 'api.openai.com', port: 443, path: '/v1/' }] };
    const basic = ['authorization', `Basic ${Buffer.from('user:sk-proj-maskedDUMMY').toString('base64')}`];
    const { headers } = substituteHeaders(basic, [scoped], { host: 'api.openai.com', port: 443, path: '/v1/x' });
    expect(Buffer.from(headers[0]![1].slice(6), 'base64').toString()).toBe(`user:${OPENAI}`);
    expect(substituteHeaders(basic, [scoped], { host: 'api.openai.com', port: 443, path: '/v2/x' }).swapped).toBe(0);
  });
});

describe('CredentialInterceptor: TLS to a bound destination', { timeout: 30_000 }, () => {
  let dir: string;
  let origin: Server;
  let authority: MitmAuthority;
  let front: NetServer;
  let interceptor: CredentialInterceptor;
  const seen: string[] = [];
  const sockets = new Set<Socket>();

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'credmask-test-'));
    // An origin for `api.openai.com` on 127.0.0.1, its certificate from a CA of the test's own.
    const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
    run(
      ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'ca.key'].concat([
        '-out',
        'ca.crt',
        '-days',
        '2',
        '-subj',
        '/CN=test origin CA',
      ]),
    );
    run(
      [
        'req',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:P-256',
        '-nodes',
        '-keyout',
        'o.key',
        '-out',
        'o.csr',
      ].concat(['-subj', '/CN=api.openai.com']),
    );
    execFileSync('sh', ['-c', 'printf "subjectAltName=DNS:api.openai.com\\n" > ext.cnf'], { cwd: dir });
    run(
      ['x509', '-req', '-in', 'o.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'o.crt'].concat([
        '-days',
        '2',
        '-extfile',
        'ext.cnf',
      ]),
    );
    origin = createHttpsServer(
      { key: readFileSync(join(dir, 'o.key')), cert: readFileSync(join(dir, 'o.crt')) },
      (req, res) => {
        seen.push(`${req.method} ${req.url} ${req.headers.authorization} ${req.headers['x-copy']}`);
        res.setHeader('x-origin', 'yes');
        res.end('hello from origin\n');
      },
    );
    await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
    const port = (origin.address() as { port: number }).port;
    authority = await MitmAuthority.create();
    interceptor = new CredentialInterceptor(
      authority,
      [
        {
          name: 'OPENAI_API_KEY',
          real: OPENAI,
          dummy: 'sk-proj-maskedDUMMY0123456789',
          destinations: [{ host: 'api.openai.com', port, path: '/' }],
          headers: [{ header: 'authorization' }],
        },
      ],
      [readFileSync(join(dir, 'ca.crt'), 'utf8')],
    );
    // What the proxy hands over once it has answered a CONNECT: the client's socket.
    front = createNetServer((socket) => {
      sockets.add(socket);
      void interceptor.intercept(
        socket,
        Buffer.alloc(0),
        { host: 'api.openai.com', port, address: '127.0.0.1' },
        (s) => void s,
        () => undefined,
      );
    });
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => front.close(resolve));
    await new Promise((resolve) => origin.close(resolve));
    authority.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** One HTTPS request through the interceptor, the client trusting `ca`; the answer or the error's code. */
  function send(ca: string, authorization: string): Promise<string> {
    const port = (front.address() as { port: number }).port;
    return new Promise((resolve) => {
      const raw = connect(port, '127.0.0.1');
      const tls = tlsConnect({ socket: raw, servername: 'api.openai.com', ca: [ca] }, () => {
        tls.write(
          `GET /v1/models HTTP/1.1\r\nHost: api.openai.com\r\nAuthorization: ${authorization}\r\n` +
            `X-Copy: ${authorization}\r\nConnection: close\r\n\r\n`,
        );
      });
      let answer = '';
      tls.on('data', (d: Buffer) => {
        answer += d;
      });
      tls.on('end', () => resolve(answer));
      tls.on('error', (e: NodeJS.ErrnoException) => resolve(`ERROR ${e.code}`));
    });
  }

  it('presents a leaf of the executor CA and swaps the dummy for the real value in Authorization only', async () => {
    seen.length = 0;
    const answer = await send(authority.caPem, 'Bearer sk-proj-maskedDUMMY0123456789');
    expect(answer).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(answer).toContain('x-origin: yes');
    expect(answer).not.toContain(OPENAI);
    expect(answer).toContain('hello from origin');
    expect(seen).toEqual([`GET /v1/models Bearer ${OPENAI} Bearer sk-proj-maskedDUMMY0123456789`]);
    expect(interceptor.counters.swapped).toBe(1);
    // Only a bound destination's CONNECT is intercepted; any other is tunnelled as it is.
    const port = (origin.address() as { port: number }).port;
    expect([interceptor.binds('api.openai.com', port), interceptor.binds('api.openai.com', 443)]).toEqual([
      true,
      false,
    ]);
    expect(interceptor.binds('127.0.0.1', port)).toBe(false);
  });

  it('answers a request for another host than the CONNECT named 400 host mismatch, sending nothing on', async () => {
    seen.length = 0;
    const port = (front.address() as { port: number }).port;
    const answer = await new Promise<string>((resolve) => {
      const tls = tlsConnect(
        { socket: connect(port, '127.0.0.1'), servername: 'api.openai.com', ca: [authority.caPem] },
        () =>
          tls.write(
            'GET / HTTP/1.1\r\nHost: other.example\r\nAuthorization: Bearer sk-proj-maskedDUMMY0123456789\r\n\r\n',
          ),
      );
      let text = '';
      tls.on('data', (d: Buffer) => {
        text += d;
      });
      tls.on('end', () => resolve(text));
    });
    expect(answer).toMatch(/^HTTP\/1\.1 400 Bad Request\r\ncontent-type: text\/plain\r\nconnection: close\r\n/);
    expect(answer.endsWith('\r\n\r\nhost mismatch')).toBe(true);
    expect(seen).toEqual([]);
  });

  it('is not trusted by a client that does not trust the executor CA', async () => {
    expect(await send(readFileSync(join(dir, 'ca.crt'), 'utf8'), 'Bearer x')).toBe('ERROR SELF_SIGNED_CERT_IN_CHAIN');
  });

  it('refuses an origin whose certificate it does not trust (502, nothing sent)', async () => {
    const untrusting = new CredentialInterceptor(authority, [], [authority.caPem]);
    const port = (origin.address() as { port: number }).port;
    const pair = createNetServer((socket) => {
      sockets.add(socket);
      void untrusting.intercept(
        socket,
        Buffer.alloc(0),
        { host: 'api.openai.com', port, address: '127.0.0.1' },
        () => undefined,
        () => undefined,
      );
    });
    await new Promise<void>((resolve) => pair.listen(0, '127.0.0.1', resolve));
    const frontPort = (pair.address() as { port: number }).port;
    seen.length = 0;
    const answer = await new Promise<string>((resolve) => {
      const tls = tlsConnect(
        { socket: connect(frontPort, '127.0.0.1'), servername: 'api.openai.com', ca: [authority.caPem] },
        () => tls.write('GET / HTTP/1.1\r\nHost: api.openai.com\r\nConnection: close\r\n\r\n'),
      );
      let text = '';
      tls.on('data', (d: Buffer) => {
        text += d;
      });
      tls.on('end', () => resolve(text));
    });
    await new Promise((resolve) => pair.close(resolve));
    expect(answer).toMatch(
      /^HTTP\/1\.1 502 Bad Gateway\r\ncontent-type: text\/plain\r\nconnection: close\r\ncontent-length: 19\r\ndate: [^\r]+\r\n\r\nmitm upstream error$/,
    );
    expect(seen).toEqual([]);
  });
});
