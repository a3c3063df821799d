/**
 * A map whose entries live `lifetimeMs` from when they were set and which holds at most `capacity` of them: the
 * relay's memory of what it must keep refusing (revoked registrations, environments' newest epochs) stays bounded
 * however many registrations pass through. Insertion order is age order (a set moves the key to the end), so both
 * expiry and eviction take from the front.
 */
export class ExpiringMap<V> {
  readonly #entries = new Map<string, { value: V; until: number }>();

  constructor(
    readonly capacity: number,
    readonly lifetimeMs: number,
  ) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError('capacity must be a positive integer');
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The value, unless it has expired at `now` (epoch ms). */
  get(key: string, now: number): V | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    if (entry.until <= now) {
      this.#entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  /** Sets the value for another full lifetime; returns how many live entries were evicted to stay within capacity. */
  set(key: string, value: V, now: number): number {
    this.#entries.delete(key);
    this.#entries.set(key, { value, until: now + this.lifetimeMs });
    this.prune(now);
    let evicted = 0;
    for (const oldest of this.#entries.keys()) {
      if (this.#entries.size <= this.capacity) break;
      this.#entries.delete(oldest);
      evicted++;
    }
    return evicted;
  }

  /** Drops the expired entries at the front (all of them unless the clock went back). */
  prune(now: number): void {
    for (const [key, entry] of this.#entries) {
      if (entry.until > now) break;
      this.#entries.delete(key);
    }
  }
}

/** A count per key (open sockets per IP, pushes being read per source): a key whose count reaches 0 is dropped. */
export class Counts {
  readonly #counts = new Map<string, number>();

  get(key: string): number {
    return this.#counts.get(key) ?? 0;
  }

  add(key: string): void {
    this.#counts.set(key, this.get(key) + 1);
  }

  remove(key: string): void {
    const left = this.get(key) - 1;
    if (left <= 0) this.#counts.delete(key);
    else this.#counts.set(key, left);
  }
}
