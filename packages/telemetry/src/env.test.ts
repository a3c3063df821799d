import { describe, expect, it } from 'vitest';
import { otelEnvSettings, serviceTelemetryOptions, TelemetryConfigError } from './env.js';

describe('otelEnvSettings', () => {
  it('exports nothing when no variable asks for it', () => {
    expect(otelEnvSettings({})).toEqual({
      serviceName: null,
      resourceAttributes: {},
      otlpHttp: null,
      exportIntervalMs: null,
      exportTimeoutMs: null,
      temporality: null,
    });
  });

  it('OTEL_EXPORTER_OTLP_ENDPOINT is a base: /v1/metrics is appended after its path; protobuf by default', () => {
    expect(otelEnvSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).otlpHttp).toEqual({
      endpoint: 'http://collector:4318/v1/metrics',
      protocol: 'binary',
    });
    expect(otelEnvSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://gw.example/otlp/' }).otlpHttp?.endpoint).toBe(
      'https://gw.example/otlp/v1/metrics',
    );
    expect(otelEnvSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://gw.example/otlp' }).otlpHttp?.endpoint).toBe(
      'https://gw.example/otlp/v1/metrics',
    );
  });

  it('the metrics endpoint, protocol and headers win over the generic ones; the endpoint is used as given', () => {
    const settings = otelEnvSettings({
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://generic:4318',
      OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: 'http://metrics:9999/custom/path',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_HEADERS: 'x-team=exec, authorization=Basic%20abc%3D',
      OTEL_EXPORTER_OTLP_METRICS_HEADERS: 'x-team=metrics',
    });
    expect(settings.otlpHttp).toEqual({
      endpoint: 'http://metrics:9999/custom/path',
      protocol: 'json',
      headers: { 'x-team': 'metrics', authorization: 'Basic abc=' },
    });
  });

  it('OTEL_METRICS_EXPORTER: otlp without an endpoint uses the default one; none or another exporter turns it off', () => {
    expect(otelEnvSettings({ OTEL_METRICS_EXPORTER: 'otlp' }).otlpHttp?.endpoint).toBe(
      'http://localhost:4318/v1/metrics',
    );
    expect(otelEnvSettings({ OTEL_METRICS_EXPORTER: 'prometheus, otlp' }).otlpHttp).not.toBeNull();
    expect(
      otelEnvSettings({ OTEL_METRICS_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }).otlpHttp,
    ).toBeNull();
    expect(
      otelEnvSettings({ OTEL_METRICS_EXPORTER: 'prometheus', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }).otlpHttp,
    ).toBeNull();
    expect(
      otelEnvSettings({ OTEL_SDK_DISABLED: 'TRUE', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }).otlpHttp,
    ).toBeNull();
    expect(otelEnvSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }).otlpHttp, 'blank is unset').toBeNull();
  });

  it('service name, resource attributes, interval, timeouts and temporality', () => {
    const settings = otelEnvSettings({
      OTEL_RESOURCE_ATTRIBUTES:
        'service.name=from-attributes,deployment.environment=prod,k8s.pod.name=relay-0,note=a%2Cb',
      OTEL_METRIC_EXPORT_INTERVAL: '15000',
      OTEL_METRIC_EXPORT_TIMEOUT: '9000',
      OTEL_EXPORTER_OTLP_TIMEOUT: '3000',
      OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: 'Delta',
    });
    expect(settings).toMatchObject({
      serviceName: 'from-attributes',
      resourceAttributes: { 'deployment.environment': 'prod', 'k8s.pod.name': 'relay-0', note: 'a,b' },
      exportIntervalMs: 15_000,
      exportTimeoutMs: 3_000,
      temporality: 'delta',
    });
    expect(
      otelEnvSettings({ OTEL_SERVICE_NAME: 'relay-eu', OTEL_RESOURCE_ATTRIBUTES: 'service.name=x' }).serviceName,
    ).toBe('relay-eu');
    expect(otelEnvSettings({ OTEL_METRIC_EXPORT_TIMEOUT: '9000' }).exportTimeoutMs).toBe(9_000);
    expect(
      otelEnvSettings({ OTEL_EXPORTER_OTLP_METRICS_TIMEOUT: '100', OTEL_EXPORTER_OTLP_TIMEOUT: '3000' })
        .exportTimeoutMs,
    ).toBe(100);
  });

  it.each([
    [
      { OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317' },
      /OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported/,
    ],
    [{ OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: 'http/xml', OTEL_METRICS_EXPORTER: 'otlp' }, /METRICS_PROTOCOL=http\/xml/],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, /OTEL_EXPORTER_OTLP_ENDPOINT must be an http/],
    [{ OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: 'not a url' }, /OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is not a URL/],
    [{ OTEL_METRIC_EXPORT_INTERVAL: '0' }, /OTEL_METRIC_EXPORT_INTERVAL=0 is not a whole number/],
    [{ OTEL_METRIC_EXPORT_INTERVAL: '1.5s' }, /OTEL_METRIC_EXPORT_INTERVAL/],
    [{ OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: 'sometimes' }, /TEMPORALITY_PREFERENCE=sometimes/],
    [{ OTEL_RESOURCE_ATTRIBUTES: 'a=1,novalue' }, /OTEL_RESOURCE_ATTRIBUTES: entry 2 is not/],
  ])('refuses %j', (env, message) => {
    expect(() => otelEnvSettings(env)).toThrow(TelemetryConfigError);
    expect(() => otelEnvSettings(env)).toThrow(message);
  });

  it('a malformed header is named by position, never by its value', () => {
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%ZZsecret',
    };
    expect(() => otelEnvSettings(env)).toThrow('OTEL_EXPORTER_OTLP_HEADERS: entry 1 is not a header');
    try {
      otelEnvSettings(env);
    } catch (err) {
      expect((err as Error).message).not.toContain('secret');
    }
  });
});

describe('serviceTelemetryOptions', () => {
  it('Prometheus with process metrics always; OTLP cumulative through the environment’s proxies', () => {
    const options = serviceTelemetryOptions(
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_SERVICE_NAME: 'relay-eu-1',
        HTTPS_PROXY: 'http://proxy:3128',
        HTTP_PROXY: 'http://proxy:3128',
      },
      { serviceName: 'tether-relay', serviceVersion: '0.1.0' },
    );
    expect(options).toMatchObject({
      serviceName: 'relay-eu-1',
      serviceVersion: '0.1.0',
      prometheus: true,
      processMetrics: true,
      temporality: 'cumulative',
      otlpHttp: { endpoint: 'http://collector:4318/v1/metrics', protocol: 'binary' },
    });
    expect(options.otlpHttp?.proxy?.http?.href).toBe('http://proxy:3128/');
    expect(serviceTelemetryOptions({}, { serviceName: 'tether-registry' })).toMatchObject({
      serviceName: 'tether-registry',
      otlpHttp: null,
      prometheus: true,
    });
  });

  it('a bad proxy variable is a configuration error too (only when exporting)', () => {
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', HTTPS_PROXY: 'ftp://proxy' };
    expect(() => serviceTelemetryOptions(env, { serviceName: 's' })).toThrow(TelemetryConfigError);
    expect(() => serviceTelemetryOptions({ HTTPS_PROXY: 'ftp://proxy' }, { serviceName: 's' })).not.toThrow();
  });
});
