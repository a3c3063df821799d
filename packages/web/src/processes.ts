import type { AttachedProcess, Environment, ProcessInfo } from '@tether/client/browser';
import { element } from './dom.js';
import { FittedTerminal } from './xterm.js';

/** How often the list is read again while the panel is on screen. */
const REFRESH_MS = 5000;

/** What the state column shows: the state, with the exit code once there is one. */
export function describeState(info: Pick<ProcessInfo, 'state' | 'exitCode'>): string {
  return info.exitCode === null ? info.state : `${info.state} (exit ${info.exitCode})`;
}

/**
 * One attached process in `#attached`: its retained output replayed, then live, in an xterm; keystrokes go
 * to its stdin (a tty, or a process started with stdin open; otherwise the executor says stdin is closed
 * and typing stops). Detaching leaves the process running.
 */
class AttachedView {
  private readonly view: FittedTerminal;
  private disposed = false;
  private stdinOpen = true;

  constructor(
    private readonly panel: HTMLElement,
    private readonly attached: AttachedProcess,
    private readonly note: (text: string) => void,
  ) {
    const host = panel.querySelector<HTMLElement>('.attached-terminal');
    if (!host) throw new Error('#attached has no .attached-terminal');
    this.view = new FittedTerminal(host, { fontSize: 13, convertEol: attached.info?.tty !== true });
    this.view.terminal.onData((data) => void this.input(data));
    void this.pump();
  }

  text(): string {
    return this.view.text();
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.attached.dispose();
    this.view.dispose();
    this.panel.hidden = true;
  }

  private async pump(): Promise<void> {
    try {
      for await (const event of this.attached) {
        if (event.kind === 'output') this.view.terminal.write(event.chunk);
        else if (event.kind === 'exited') this.note(`exited with code ${event.exitCode}`);
      }
    } catch (err) {
      if (!this.disposed) this.note((err as Error).message);
    }
  }

  private async input(data: string): Promise<void> {
    if (!this.stdinOpen || this.disposed) return;
    try {
      const status = await this.attached.write(data);
      if (status === 'stdinClosed' || status === 'unknownProcess') {
        this.stdinOpen = false;
        this.note(status === 'stdinClosed' ? 'its stdin is closed: output only' : 'the process is gone');
      }
    } catch (err) {
      this.stdinOpen = false;
      this.note((err as Error).message);
    }
  }
}

export interface ProcessesPanel {
  refresh(): Promise<void>;
  /** The attached process's terminal text ('' when none). */
  attachedText(): string;
}

/**
 * Wires `#processes` (the processes the executor lists to this session: its own and the detached ones of the key
 * behind it, or every one for an admin key; kill and attach) and `#attached`.
 */
export function mountProcesses(env: Environment): ProcessesPanel {
  const panel = element<HTMLElement>('processes');
  const body = panel.querySelector<HTMLTableSectionElement>('tbody');
  if (!body) throw new Error('#processes has no tbody');
  const refreshButton = element<HTMLButtonElement>('refresh-processes');
  const message = element<HTMLElement>('processes-message');
  const attachedPanel = element<HTMLElement>('attached');
  const attachedTitle = element<HTMLElement>('attached-title');
  const attachedNote = element<HTMLElement>('attached-note');
  const detachButton = element<HTMLButtonElement>('detach');
  let view: AttachedView | null = null;
  let refreshing: Promise<void> | null = null;

  const row = (info: ProcessInfo): HTMLTableRowElement => {
    const tr = document.createElement('tr');
    tr.dataset.processId = info.processId;
    tr.dataset.state = info.state;
    tr.dataset.owner = info.detached ? 'detached' : 'session';
    tr.title = `pid ${info.pid ?? '–'}, ${info.detached ? 'detached (the executor’s)' : 'this session’s'}${info.tty ? ', tty' : ''}, started ${new Date(info.startedAtMs).toLocaleString()}`;
    for (const text of [info.processId, info.argv.join(' '), describeState(info)]) {
      const td = document.createElement('td');
      td.textContent = text;
      td.title = text;
      tr.append(td);
    }
    const actions = document.createElement('td');
    const live = info.state === 'running' || info.state === 'starting';
    const attach = document.createElement('button');
    attach.type = 'button';
    attach.className = 'attach';
    attach.textContent = 'attach';
    attach.title = 'follow its output here';
    attach.addEventListener('click', () => void attachTo(info));
    const kill = document.createElement('button');
    kill.type = 'button';
    kill.className = 'kill';
    kill.textContent = 'kill';
    kill.disabled = !live;
    kill.addEventListener('click', () => void killProcess(info.processId, kill));
    actions.append(attach, kill);
    tr.append(actions);
    return tr;
  };

  const refresh = (): Promise<void> => {
    refreshing ??= (async () => {
      try {
        const processes = await env.listProcesses();
        processes.sort((a, b) => b.startedAtMs - a.startedAtMs);
        body.replaceChildren(...processes.map(row));
        message.textContent = processes.length === 0 ? 'no processes' : '';
        panel.dataset.loaded = 'true';
      } catch (err) {
        message.textContent = (err as Error).message;
      } finally {
        refreshing = null;
      }
    })();
    return refreshing;
  };

  const killProcess = async (processId: string, button: HTMLButtonElement) => {
    button.disabled = true;
    let outcome: string;
    try {
      await env.kill(processId);
      outcome = `sent SIGTERM to ${processId}`;
    } catch (err) {
      outcome = (err as Error).message;
    }
    await refresh();
    message.textContent = outcome;
  };

  const attachTo = async (info: ProcessInfo) => {
    view?.dispose();
    view = null;
    attachedNote.textContent = '';
    try {
      const attached = await env.attach(info.processId, {
        onGap: (first, last) => {
          attachedNote.textContent = `output ${first}–${last} was no longer retained`;
        },
      });
      attachedTitle.textContent = `${info.processId}: ${info.argv.join(' ')}`;
      attachedPanel.hidden = false;
      attachedPanel.dataset.processId = info.processId;
      view = new AttachedView(attachedPanel, attached, (text) => {
        attachedNote.textContent = text;
      });
    } catch (err) {
      message.textContent = (err as Error).message;
    }
  };

  detachButton.addEventListener('click', () => {
    view?.dispose();
    view = null;
  });
  refreshButton.addEventListener('click', () => void refresh());
  // Read again every few seconds while the list is on screen and the tab visible.
  let onScreen = false;
  new IntersectionObserver((entries) => {
    onScreen = entries.some((entry) => entry.isIntersecting);
  }).observe(panel);
  setInterval(() => {
    if (onScreen && document.visibilityState === 'visible') void refresh();
  }, REFRESH_MS);
  void refresh();

  return { refresh, attachedText: () => view?.text() ?? '' };
}
