import { describe, expect, it } from 'vitest';
import { hasTmux, startTmux } from './tmux.js';

describe.runIf(hasTmux() || process.env.CI)('startTmux', () => {
  it('shows the screen, resizes the window (SIGWINCH) and reports the exit status', async () => {
    await using tmux = await startTmux({ command: 'sh -c "stty size; read x; stty size; exit 3"', cols: 80, rows: 24 });
    await tmux.waitFor('24 80');
    await tmux.resize(120, 40);
    await tmux.send(['hi', 'Enter']);
    await tmux.waitFor('40 120');
    expect(await tmux.waitForExit()).toBe(3);
  });
});
