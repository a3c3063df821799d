import type { AttachedProcess, Environment, Participant } from '@tether/client/browser';
import { element } from './dom.js';
import { ProcessInput } from './process-input.js';
import { FittedTerminal } from './xterm.js';

/** How a participant is listed (text only: every field came from the executor). */
export function describeParticipant(p: Participant): string {
  const roles = [p.access === 'control' ? 'controls' : 'watches', ...(p.owner ? ['owner'] : [])];
  const sessions = p.sessions > 1 ? `, ${p.sessions} sessions` : '';
  return `${p.who}${p.you ? ' (you)' : ''}: ${roles.join(', ')}${sessions}`;
}

export interface SharedViewEvents {
  /** The share ended (revoked or expired), the process is gone, or the connection was lost for good. */
  onEnded(reason: string): void;
}

/**
 * A process shared with this page by a link (`harness share` printed it): attached by the share's token, its
 * output live in an xterm (replayed first), the participants the executor lists, and — where the share gives
 * control — "take control": only then do keystrokes reach the process and does its terminal take this page's
 * size (the size follows the most recent controller). Until then, what is typed here reaches nothing.
 */
export class SharedView {
  private readonly panel = element<HTMLElement>('shared');
  private readonly title = element<HTMLElement>('shared-title');
  private readonly accessBadge = element<HTMLElement>('shared-access');
  private readonly takeControl = element<HTMLButtonElement>('take-control');
  private readonly note = element<HTMLElement>('shared-note');
  private readonly list = element<HTMLUListElement>('participants');
  private readonly view: FittedTerminal;
  private attached: AttachedProcess | null = null;
  /** Keystrokes and sizes to the process, once attached (sent only while this page has control). */
  private sender: ProcessInput | null = null;
  private access: 'view' | 'control' = 'view';
  private controlling = false;
  private ended = false;
  private current: Participant[] = [];

  constructor(
    private readonly processId: string,
    private readonly events: SharedViewEvents,
  ) {
    this.panel.hidden = false;
    this.title.textContent = `shared process ${processId}`;
    this.view = new FittedTerminal(element<HTMLElement>('shared-terminal'), { fontSize: 14 }, () => this.refit());
    this.view.terminal.onData((data) => this.input(data));
    this.takeControl.addEventListener('click', () => this.toggleControl());
  }

  /** Attaches with the share's token and follows the process until it ends or the share does. */
  async start(env: Environment, shareToken: string): Promise<void> {
    const attached = await env.attach(this.processId, {
      shareToken,
      onParticipants: (participants) => this.showParticipants(participants),
      onGap: (first, last) => {
        this.note.textContent = `output ${first}–${last} was no longer retained`;
      },
    });
    this.attached = attached;
    this.sender = new ProcessInput(attached, {
      onStdinGone: (status) => {
        this.note.textContent = status === 'stdinClosed' ? 'its stdin is closed' : 'the process is gone';
      },
      onError: (error) => {
        this.note.textContent = error.message;
      },
    });
    const info = attached.info;
    this.access = info?.access === 'control' ? 'control' : 'view';
    if (info !== null) {
      this.title.textContent = `shared process ${this.processId}: ${info.argv.join(' ')}`;
      this.title.title = this.title.textContent;
    }
    this.showParticipants(attached.participants);
    this.showAccess();
    this.view.terminal.focus();
    void this.pump(attached);
  }

  text(): string {
    return this.view.text();
  }

  participants(): Participant[] {
    return [...this.current];
  }

  state(): { access: 'view' | 'control'; controlling: boolean; ended: boolean; rows: number; cols: number } {
    const { rows, cols } = this.view.size;
    return { access: this.access, controlling: this.controlling, ended: this.ended, rows, cols };
  }

  dispose(): void {
    this.ended = true;
    this.sender?.stop();
    this.attached?.dispose();
    this.view.dispose();
  }

  private showAccess(): void {
    this.takeControl.disabled = this.ended || this.access !== 'control';
    this.takeControl.textContent = this.controlling ? 'release control' : 'take control';
    this.takeControl.title =
      this.access === 'control'
        ? 'type into the process; its terminal takes this window’s size'
        : 'this link is read-only: it watches, it cannot type';
    this.accessBadge.textContent = this.controlling
      ? 'you are typing into it'
      : this.access === 'control'
        ? 'watching (you may take control)'
        : 'read-only';
    this.panel.dataset.access = this.access;
    this.panel.dataset.controlling = String(this.controlling);
  }

  private showParticipants(participants: Participant[]): void {
    this.current = participants;
    this.list.replaceChildren(
      ...participants.map((p) => {
        const li = document.createElement('li');
        li.textContent = describeParticipant(p);
        li.dataset.access = p.access;
        if (p.you) li.dataset.you = 'true';
        return li;
      }),
    );
  }

  private toggleControl(): void {
    if (this.ended || this.access !== 'control') return;
    this.controlling = !this.controlling;
    this.showAccess();
    this.note.textContent = this.controlling
      ? 'you have control: what you type reaches the process'
      : 'you released control: what you type reaches nothing';
    if (this.controlling) {
      this.refit();
      this.view.terminal.focus();
    }
  }

  private async pump(attached: AttachedProcess): Promise<void> {
    try {
      for await (const event of attached) {
        if (event.kind === 'output') this.view.terminal.write(event.chunk);
        else if (event.kind === 'exited') this.end(`the process exited with code ${event.exitCode}`);
      }
      this.end('the process ended');
    } catch (err) {
      this.end((err as Error).message);
    }
  }

  private end(reason: string): void {
    if (this.ended) return;
    this.ended = true;
    this.controlling = false;
    this.sender?.stop();
    this.showAccess();
    this.note.textContent = reason;
    this.events.onEnded(reason);
  }

  private input(data: string): void {
    if (this.ended) return;
    if (!this.controlling) {
      this.note.textContent =
        this.access === 'control'
          ? 'you are watching: take control to type into the process'
          : 'this link is read-only: what you type reaches nothing';
      return;
    }
    this.sender?.type(data);
  }

  private refit(): void {
    if (!this.controlling || this.ended) return;
    const { rows, cols } = this.view.size;
    this.sender?.size(rows, cols);
  }
}
