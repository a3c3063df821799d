/**
 * Values every Tether CLI spells the same way: durations (`500ms`, `30s`, `5m`, `1h`) and listen addresses
 * (`host:port`, or the same as a `ws://` or `http://` URL).
 */
import { InvalidArgumentError } from 'commander';

/** The unit a bare number is in: the unit the flag took before it took units. */
export type BareUnit = 'ms' | 's';

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const;
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/;

/** What a duration looks like, for messages: `500ms, 30s, 5m or 1h (a bare number is seconds)`. */
export function durationHint(bare: BareUnit): string {
  return `a duration such as 500ms, 30s, 5m or 1h (a bare number is ${bare === 'ms' ? 'milliseconds' : 'seconds'})`;
}

/**
 * Milliseconds in `text`: a number with a unit (`ms`, `s`, `m`, `h`), or a bare number in `bare`. Fractions
 * are allowed (`1.5s`); the result is rounded to whole milliseconds. Throws InvalidArgumentError (commander's
 * usage error) for anything else, negative numbers included.
 */
export function parseDuration(text: string, bare: BareUnit): number {
  const match = DURATION.exec(text.trim());
  const ms = match ? Math.round(Number(match[1]) * UNIT_MS[(match[2] ?? bare) as keyof typeof UNIT_MS]) : Number.NaN;
  if (!Number.isSafeInteger(ms)) {
    throw new InvalidArgumentError(`expected ${durationHint(bare)}, got ${JSON.stringify(text)}`);
  }
  return ms;
}

/** `ms` in the largest unit that keeps it whole: `10s`, `5m`, `1h`, `1500ms`. */
export function formatDuration(ms: number): string {
  for (const unit of ['h', 'm', 's'] as const) {
    if (ms !== 0 && ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`;
  }
  return `${ms}ms`;
}

export interface DurationBounds {
  bare: BareUnit;
  /** Smallest accepted value in ms (default 1: zero is refused). */
  min?: number;
  /** Largest accepted value in ms. */
  max?: number;
  /** Whole seconds only (for values sent as seconds). */
  wholeSeconds?: boolean;
}

/** A commander argParser for a duration flag: the value in ms, checked against the bounds. */
export function durationArg(bounds: DurationBounds): (value: string) => number {
  const min = bounds.min ?? 1;
  return (value) => {
    const ms = parseDuration(value, bounds.bare);
    if (ms < min || (bounds.max !== undefined && ms > bounds.max)) {
      const low = min === 0 ? 'from 0' : min === 1 ? 'more than 0' : `at least ${formatDuration(min)}`;
      const high =
        bounds.max === undefined ? '' : `${min === 0 ? ' to' : ' and at most'} ${formatDuration(bounds.max)}`;
      throw new InvalidArgumentError(`expected a duration ${low}${high}, got ${JSON.stringify(value)}`);
    }
    if (bounds.wholeSeconds && ms % 1000 !== 0) {
      throw new InvalidArgumentError(`expected whole seconds, got ${JSON.stringify(value)}`);
    }
    return ms;
  };
}

export interface ListenAddress {
  host: string;
  port: number;
}

/**
 * `--listen` of a server: `HOST:PORT` (`[IPv6]:PORT` for an IPv6 address) or the same as a URL of the
 * server's scheme (`ws://HOST:PORT` for the relay, `http://HOST:PORT` for the registry), as the server
 * prints it once bound; port 0 picks a free one. A trailing `/` is allowed, no other path.
 */
export function parseListenAddress(text: string, scheme: 'ws' | 'http'): ListenAddress {
  const expected = `expected HOST:PORT or ${scheme}://HOST:PORT (port 0 picks a free one)`;
  const prefix = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text);
  if (prefix && prefix[1]?.toLowerCase() !== scheme) {
    throw new InvalidArgumentError(`${expected}, got a ${prefix[1]}:// URL`);
  }
  const authority = prefix ? text.slice(prefix[0].length).replace(/\/$/, '') : text;
  const match = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(authority);
  const port = Number(match?.[2]);
  if (!match || port > 65_535) throw new InvalidArgumentError(expected);
  return { host: (match[1] as string).replace(/^\[|\]$/g, ''), port };
}

/** A commander argParser for a count: a positive (safe) integer. */
export function positiveInteger(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new InvalidArgumentError('expected a positive integer');
  }
  return Number(value);
}

/**
 * A commander argParser for a repeatable flag that also takes a comma-separated list: the entries of every
 * occurrence in order, each trimmed, empty ones dropped. `check` throws an InvalidArgumentError naming a bad
 * entry.
 */
export function listArg(check: (entry: string) => void): (value: string, previous: string[] | undefined) => string[] {
  return (value, previous) => {
    const entries = value
      .split(',')
      .map((entry) => entry.trim())
      .filter((entry) => entry !== '');
    for (const entry of entries) check(entry);
    return [...(previous ?? []), ...entries];
  };
}
