import type { CliIo } from '../common.js';

/**
 * The process's terminal follows this window: every change of the window's size (the terminal's SIGWINCH is
 * the stream's 'resize') is sent, one resize in flight at a time, sizes that arrive meanwhile collapsing into
 * the latest; a failed resize (the process ended) stops nothing else. `now`: the size is sent at once too (an
 * attacher's window wins over the size the process had). Answers the cleanup.
 */
export function followWindowSize(
  process: { resize(rows: number, cols: number): Promise<void> },
  io: CliIo,
  now = false,
): () => void {
  let sent = now ? '' : `${io.stdout.rows}x${io.stdout.columns}`;
  let inFlight = false;
  let stopped = false;
  const send = () => {
    const rows = io.stdout.rows;
    const cols = io.stdout.columns;
    if (stopped || inFlight || !rows || !cols || `${rows}x${cols}` === sent) return;
    sent = `${rows}x${cols}`;
    inFlight = true;
    process
      .resize(rows, cols)
      .catch(() => undefined)
      .finally(() => {
        inFlight = false;
        send();
      });
  };
  io.stdout.on('resize', send);
  send();
  return () => {
    stopped = true;
    io.stdout.off('resize', send);
  };
}
