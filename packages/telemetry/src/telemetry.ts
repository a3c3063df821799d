import {
  type Attributes,
  type BatchObservableResult,
  type Counter,
  createNoopMeter,
  type Histogram,
  type Meter,
  type Observable,
  type ObservableResult,
  ValueType,
} from '@opentelemetry/api';
import type { TelemetryOptions } from './options.js';
import type { SdkParts } from './sdk.js';

/** The content type of the Prometheus text exposition format that `prometheus()` renders. */
export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

/** Histogram bucket bounds (seconds) Codex uses for every exec-server duration. */
export const DURATION_BUCKETS_SECONDS: readonly number[] = [
  0, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 12, 15, 20, 30, 60, 120,
];

/** Reports one value of an observed instrument, with its attributes (build them once, not per report). */
export type Observe = (report: (value: number, attributes?: Attributes) => void) => void;

/** An instrument of `Telemetry.observe`: a gauge (current value) or a counter (running total). */
export interface ObservedInstrument {
  kind: 'gauge' | 'counter';
  description: string;
}

/**
 * Owns one MeterProvider and its readers. Instruments are made through it (integer counters, duration
 * histograms with Codex's bounds, observable gauges). `flush()` pushes what was recorded. `shutdown()`
 * pushes a last time and stops. Without an exporter or Prometheus the meter is a no-op one, and the SDK
 * is never loaded: instrumented code then costs a function call.
 */
export class Telemetry {
  readonly meter: Meter;
  readonly enabled: boolean;
  private readonly sdk: SdkParts | null;
  private readonly onError: (err: Error) => void;
  private closing: Promise<void> | null = null;

  private constructor(
    sdk: SdkParts | null,
    serviceName: string,
    serviceVersion: string | undefined,
    onError: (err: Error) => void,
  ) {
    this.sdk = sdk;
    this.onError = onError;
    this.enabled = sdk !== null;
    this.meter = sdk ? sdk.provider.getMeter(serviceName, serviceVersion) : createNoopMeter();
  }

  /** Loads the SDK when `options` export somewhere; otherwise the same as `disabled()`. */
  static async create(options: TelemetryOptions): Promise<Telemetry> {
    const onError = options.onError ?? (() => {});
    if (!options.otlpHttp && !options.prometheus) return new Telemetry(null, options.serviceName, undefined, onError);
    const { createSdk } = await import('./sdk.js');
    return new Telemetry(await createSdk(options, onError), options.serviceName, options.serviceVersion, onError);
  }

  /** Whether `prometheus()` can render (created with `prometheus: true`). */
  get servesPrometheus(): boolean {
    return this.sdk?.pull != null;
  }

  /** A telemetry that records nothing and exports nothing. */
  static disabled(): Telemetry {
    return new Telemetry(null, 'disabled', undefined, () => {});
  }

  /** A monotonic integer counter. */
  counter(name: string, description: string): Counter {
    return this.meter.createCounter(name, { description, valueType: ValueType.INT });
  }

  /** A duration histogram in seconds with Codex's bucket bounds. */
  durationHistogram(name: string, description: string): Histogram {
    return this.meter.createHistogram(name, {
      description,
      unit: 's',
      valueType: ValueType.DOUBLE,
      advice: { explicitBucketBoundaries: [...DURATION_BUCKETS_SECONDS] },
    });
  }

  /**
   * An integer gauge read at collection time: `observe` reports the current value(s), so the code
   * that changes the value keeps a plain number and pays nothing per change.
   */
  gauge(name: string, description: string, observe: Observe): void {
    const gauge = this.meter.createObservableGauge(name, { description, valueType: ValueType.INT });
    gauge.addCallback((result: ObservableResult) => observe((value, attributes) => result.observe(value, attributes)));
  }

  /**
   * Instruments read together by one callback at collection time, so that shared state is walked once for
   * all of them. A `counter` reports its running total (a monotonic sum): the counting code adds to a plain
   * number and allocates nothing, which is what a per-frame counter needs. `read` may be async.
   */
  observe<Name extends string>(
    instruments: Readonly<Record<Name, ObservedInstrument>>,
    read: (report: (name: Name, value: number, attributes?: Attributes) => void) => void | Promise<void>,
  ): void {
    const observables = new Map<string, Observable>();
    for (const [name, { kind, description }] of Object.entries<ObservedInstrument>(instruments)) {
      const options = { description, valueType: ValueType.INT };
      observables.set(
        name,
        kind === 'counter'
          ? this.meter.createObservableCounter(name, options)
          : this.meter.createObservableGauge(name, options),
      );
    }
    this.meter.addBatchObservableCallback(
      (result: BatchObservableResult) =>
        read((name, value, attributes) => result.observe(observables.get(name) as Observable, value, attributes)),
      [...observables.values()],
    );
  }

  /** Pushes everything recorded so far (no-op without an exporter). Export failures go to `onError`. */
  async flush(): Promise<void> {
    if (!this.sdk || this.closing) return;
    try {
      await this.sdk.provider.forceFlush();
    } catch (err) {
      this.onError(err as Error);
    }
  }

  /** Exports a last time and stops the readers; idempotent, never throws. */
  shutdown(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.sdk) return;
      try {
        await this.sdk.provider.shutdown();
      } catch (err) {
        this.onError(err as Error);
      }
    })();
    return this.closing;
  }

  /**
   * The instruments in the Prometheus text exposition format (cumulative), rendered by OpenTelemetry's
   * Prometheus serializer, then prom-client's process collectors when `processMetrics` is on. Needs
   * `prometheus: true`. Serve it as `PROMETHEUS_CONTENT_TYPE`.
   */
  async prometheus(): Promise<string> {
    const sdk = this.sdk;
    if (!sdk?.pull) throw new Error('telemetry was created without prometheus: true');
    const { resourceMetrics, errors } = await sdk.pull.collect();
    for (const err of errors) this.onError(err instanceof Error ? err : new Error(String(err)));
    const text = sdk.serialize(resourceMetrics);
    return sdk.processMetrics ? text + (await sdk.processMetrics.metrics()) : text;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.shutdown();
  }
}
