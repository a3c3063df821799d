import { captureIo, runCli } from '@tether/test-kit';
import { InvalidArgumentError, Option } from 'commander';
import { describe, expect, it } from 'vitest';
import { type ServiceIo, serviceProgram, serviceTelemetry } from './cli-service.js';
import { listArg, positiveInteger } from './cli-values.js';
import { silentLogger } from './logger.js';

describe('a service program', () => {
  const served: unknown[] = [];
  const build = (io: ServiceIo, exit: (code: number) => void) =>
    serviceProgram<{ listen: unknown; count: number; logLevel: string }>(
      {
        scheme: { app: 'demo' },
        version: '1.2.3',
        description: 'a demo service',
        serve: {
          description: 'serve the demo',
          listen: { scheme: 'ws', port: 9000 },
          options: [new Option('--count <n>', 'how many').argParser(positiveInteger).default(1)],
          helpAfter: '\nAfter the options.',
          run: async (options) => {
            served.push(options);
            return 3;
          },
        },
      },
      io,
      exit,
    );

  it('serve takes --listen in its scheme, its own options and the log flags, each also from its variable', async () => {
    served.length = 0;
    const run = await runCli(build, 'demo', ['serve', '--listen', 'ws://[::1]:0'], { TETHER_DEMO_COUNT: '5' });
    expect(run).toEqual({ code: 3, stdout: '', stderr: '' });
    expect(served).toEqual([{ listen: { host: '::1', port: 0 }, count: 5, logLevel: 'info', logFormat: 'auto' }]);
    const byDefault = await runCli(build, 'demo', ['serve'], { TETHER_LOG_FORMAT: 'json' });
    expect(byDefault.stderr).toBe('demo: warning: TETHER_LOG_FORMAT is deprecated; use TETHER_DEMO_LOG_FORMAT\n');
    expect(byDefault.code).toBe(3);
    expect(served[1]).toMatchObject({ listen: { host: '127.0.0.1', port: 9000 }, count: 1, logFormat: 'json' });
  });

  it('prints its version and help, and a usage error with the help after it', async () => {
    expect(await runCli(build, 'demo', ['--version'])).toMatchObject({ code: 0, stdout: '1.2.3\n' });
    const help = (await runCli(build, 'demo', ['serve', '--help'])).stdout.replace(/\s+/g, ' ');
    expect(help).toContain(
      '--listen <address> address to listen on: HOST:PORT or ws://HOST:PORT (port 0 picks one) ' +
        '(default: 127.0.0.1:9000, env: TETHER_DEMO_LISTEN) --count <n>',
    );
    expect(help.indexOf('--count')).toBeLessThan(help.indexOf('--log-level'));
    expect(help).toMatch(/After the options\. $/);
    const bad = await runCli(build, 'demo', ['serve', '--listen', 'http://h:1']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('expected HOST:PORT or ws://HOST:PORT');
    expect(bad.stderr).toContain('Usage: demo serve');
  });
});

describe("a service's telemetry", () => {
  it('is tether-APP with the process metrics, or undefined with the variable named on stderr', () => {
    const good = captureIo({ OTEL_RESOURCE_ATTRIBUTES: 'region=eu' });
    expect(serviceTelemetry('demo', good.io, silentLogger())).toMatchObject({
      serviceName: 'tether-demo',
      resourceAttributes: { region: 'eu' },
      prometheus: true,
      processMetrics: true,
    });
    const bad = captureIo({ OTEL_METRIC_EXPORT_INTERVAL: '0' });
    expect(serviceTelemetry('demo', bad.io, silentLogger())).toBeUndefined();
    expect(bad.stderr()).toMatch(/^demo: OTEL_METRIC_EXPORT_INTERVAL=0 is not a whole number.*\n$/);
  });
});

describe('list and count flags', () => {
  it('a list takes every occurrence, comma-separated, trimmed, without empty entries, and checks each', () => {
    const seen: string[] = [];
    const parse = listArg((entry) => {
      seen.push(entry);
      if (entry === 'bad') throw new InvalidArgumentError(`bad entry: ${entry}`);
    });
    expect(parse('a, b,,', undefined)).toEqual(['a', 'b']);
    expect(parse(' c ', ['a', 'b'])).toEqual(['a', 'b', 'c']);
    expect(seen).toEqual(['a', 'b', 'c']);
    expect(() => parse('a,bad', [])).toThrow('bad entry: bad');
  });

  it('a count is a positive safe integer', () => {
    expect(positiveInteger('1')).toBe(1);
    expect(positiveInteger('250')).toBe(250);
    for (const bad of ['0', '-1', '1.5', '1e3', '', ' 1', '9'.repeat(20)]) {
      expect(() => positiveInteger(bad), bad).toThrow('expected a positive integer');
    }
  });
});
