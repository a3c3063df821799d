/** What a batch corks: a `net.Socket` (structurally, so this package needs no Node types). */
export interface Corkable {
  cork(): void;
  uncork(): void;
}

/**
 * Write batching: while `around` runs one unit of work (the handling of one socket read), every socket
 * written to is corked once and uncorked when the unit ends, so the frames it queued leave in one writev per
 * socket instead of one write each. Outside a unit, `join` corks for the caller's writes alone.
 *
 * A batch belongs to its owner (a relay's fast path); units of work are synchronous, so one batch serves all
 * of the owner's sockets.
 */
export class WriteBatch {
  #corked: Corkable[] | null = null;

  /** Runs `unit` with writes batched; nested calls join the outer unit. */
  readonly around = <T>(unit: () => T): T => {
    const outer = this.#corked === null;
    if (outer) this.#corked = [];
    try {
      return unit();
    } finally {
      if (outer) {
        const sockets = this.#corked as Corkable[];
        this.#corked = null;
        for (const socket of sockets) socket.uncork();
      }
    }
  };

  /**
   * Corks `socket` for the writes that follow. True when a unit is under way (it uncorks the socket when it
   * ends); false when there is none, and the caller uncorks it after its writes.
   */
  join(socket: Corkable): boolean {
    const batch = this.#corked;
    if (batch === null) {
      socket.cork();
      return false;
    }
    if (!batch.includes(socket)) {
      socket.cork();
      batch.push(socket);
    }
    return true;
  }
}
