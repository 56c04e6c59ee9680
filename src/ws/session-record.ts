// The session row of one event session, as the connection sees it: written at the hello
// before the welcome, and closed when the connection ends — also when it ends while the
// row is still being written, so that no session stays open in the database for ever.
import type { Pool } from "../db/types.js";
import { openSession, recordSessionClose, type NewSession } from "../domain/event-sessions.js";
import { describeError, type Logger } from "../log/index.js";

export class SessionRecord {
  /** The session row of a hello in progress, while it is being inserted. */
  private writing: { readonly id: string; readonly inserted: Promise<void> } | undefined;
  /** Settles when the session's close is recorded (shutdown waits for it). */
  closed: Promise<void> = Promise.resolve();

  constructor(
    private readonly pool: Pool,
    private readonly log: Logger,
  ) {}

  /**
   * Starts writing the session row; the answer rejects with the database's failure. The
   * row counts as being written until settled() — also while the caller handles a
   * failure, since an insert whose answer was lost may still have committed.
   */
  open(s: NewSession): Promise<void> {
    const inserted = openSession(this.pool, s);
    this.writing = { id: s.id, inserted };
    return inserted;
  }

  /** The insert's outcome is handled: from now on a close concerns the bound session only. */
  settled(): void {
    this.writing = undefined;
  }

  /**
   * Records the close of the bound session `boundId`, or of the session whose row is being
   * written (after its insert, whatever its outcome); with neither there is nothing to
   * record. Never rejects: a close that cannot be written is logged.
   */
  close(boundId: string | undefined): void {
    const writing = this.writing;
    if (boundId === undefined && !writing) return;
    const id = writing ? writing.id : boundId!;
    const written = writing ? writing.inserted.catch(() => undefined) : Promise.resolve();
    this.closed = written
      .then(() => recordSessionClose(this.pool, id))
      .catch((e: unknown) => this.log.log("warn", "session close not recorded", describeError(e)));
  }
}
