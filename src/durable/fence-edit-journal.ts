/**
 * The fence edit journal (main thread): every live edit applied since the last reload, one JSON line each
 * (`{"upsert": <the GeoJSON Feature as given>}` or `{"remove": "<id>"}`), appended and fsynced before the edit's
 * promise resolves, so a restart starts from the fences in force at the stop rather than from the fences file alone.
 * A reload empties it (the reloaded fences are the new base). It is rewritten compacted (the last edit of each fence
 * id) at start and whenever it holds more than twice the lines it needs.
 *
 * A crash during an append leaves a last line without its newline: it is ignored (that edit's promise had not
 * resolved). A line that is not a stored edit is skipped and reported; the rest still apply.
 */
import * as fs from 'node:fs';
import type { StoredFenceEdit } from '../fences/stored-edits.js';
import { errorText, replaceFileDurably } from './fs-util.js';

/** Name of the journal in the state directory. */
export const FENCE_EDIT_JOURNAL_FILE = 'fence-edits.ndjson';

/** First line of every journal: what the file is, and its format version. */
const HEADER = JSON.stringify({ journal: 'geofence-router fence edits', version: 1 });

/** Lines beyond those the compacted journal needs before it is rewritten (plus as many again as it needs). */
const COMPACT_SLACK_LINES = 1024;

/** Most damaged lines described one by one; the rest are counted. */
const MAX_DAMAGE_NOTES = 5;

/** What a journal file holds. */
export interface JournalContents {
  /** The stored edits, compacted: the last edit of each fence id, in the order of the ids' last removal or first upsert. */
  edits: StoredFenceEdit[];
  /** Edit lines in the file (before compaction). */
  lines: number;
  /** Lines skipped because they are not stored edits ("line 7: ..."; at most five described, then a count). */
  damaged: string[];
  /** How many lines were skipped. */
  damagedLines: number;
  /** True when the file ended in a line cut short (a crash during an append): ignored. */
  tornTail: boolean;
}

/** The id an edit is about, or null for a line that is not a stored edit. */
function editId(value: unknown): string | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return null;
  const keys = Object.keys(value);
  if (keys.length !== 1) return null;
  const v = value as Record<string, unknown>;
  if (keys[0] === 'remove') return typeof v['remove'] === 'string' && v['remove'].length > 0 ? v['remove'] : null;
  if (keys[0] !== 'upsert') return null;
  const id = (v['upsert'] as { properties?: { id?: unknown } } | null)?.properties?.id;
  // As the fence parser takes it: a non-empty string, or a finite number (fence id "42" for 42).
  if (typeof id === 'number') return Number.isFinite(id) ? String(id) : null;
  return typeof id === 'string' && id.length > 0 ? id : null;
}

/** The header line's fields, or null when `line` is not JSON. */
function parseHeader(line: string): { journal?: unknown; version?: unknown } | null {
  try {
    return JSON.parse(line) as { journal?: unknown; version?: unknown } | null;
  } catch {
    return null;
  }
}

/**
 * Reads the journal at `file` (none there: no edits). Throws an Error naming the file when it cannot be read or is a
 * journal of a format this version does not know.
 */
export function readFenceEditJournal(file: string): JournalContents {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT')
      return { edits: [], lines: 0, damaged: [], damagedLines: 0, tornTail: false };
    throw new Error(`fence edit journal ${file}: ${errorText(err)}`, { cause: err });
  }
  const parts = text.split('\n');
  const tail = parts.pop()!;
  const byId = new Map<string, StoredFenceEdit>();
  const damaged: string[] = [];
  let damagedLines = 0;
  let lines = 0;
  parts.forEach((line, i) => {
    if (i === 0) {
      const header = parseHeader(line);
      if (header?.journal === undefined) throw new Error(`fence edit journal ${file}: line 1 is not its header`);
      if (header.version !== 1)
        throw new Error(`fence edit journal ${file}: format version ${String(header.version)} is not known here`);
      return;
    }
    if (line.length === 0) return;
    lines++;
    let value: unknown;
    let id: string | null = null;
    try {
      value = JSON.parse(line);
      id = editId(value);
    } catch {
      // Counted below.
    }
    if (id === null) {
      if (++damagedLines <= MAX_DAMAGE_NOTES) damaged.push(`line ${i + 1}: not a stored fence edit`);
      return;
    }
    const edit = value as StoredFenceEdit;
    // A removal moves the id to the end (a later upsert then appends it, as it did live); an upsert keeps its place.
    if ('remove' in edit) byId.delete(id);
    byId.set(id, edit);
  });
  if (damagedLines > MAX_DAMAGE_NOTES) damaged.push(`and ${damagedLines - MAX_DAMAGE_NOTES} more lines like these`);
  return { edits: [...byId.values()], lines, damaged, damagedLines, tornTail: tail.length > 0 };
}

/** The journal of a running router: appends edits, empties on reload, compacts as it grows. */
export class FenceEditJournal {
  private fd: number;
  /** Edit lines in the file. */
  private lines = 0;
  /** Ids with an edit in the file: the lines a compacted journal needs. */
  private readonly ids = new Set<string>();
  /**
   * An append failed part way: the file may end in part of a line, which the next edit's line would continue (and
   * both would be skipped at the next start). The next append rewrites the journal first, without it.
   */
  private torn = false;

  private constructor(
    private readonly file: string,
    contents: JournalContents,
  ) {
    // Rewritten compacted at open (a torn or damaged line goes with it), then appended to.
    this.fd = -1;
    this.reopen(contents.edits);
  }

  /** Opens the journal at `file` for appending, rewriting it first as `contents` (what was read at start). */
  static open(file: string, contents: JournalContents): FenceEditJournal {
    return new FenceEditJournal(file, contents);
  }

  /** Appends one edit and fsyncs it; throws (an Error naming the file) when it cannot be written. */
  append(edit: StoredFenceEdit): void {
    const bytes = Buffer.from(`${JSON.stringify(edit)}\n`, 'utf8');
    // A part line a failed append left is a torn tail to the reader: the rewrite drops it (its error names the file).
    if (this.torn) this.compact();
    this.torn = true;
    try {
      let done = 0;
      while (done < bytes.length) done += fs.writeSync(this.fd, bytes, done, bytes.length - done);
      fs.fsyncSync(this.fd);
    } catch (err) {
      throw new Error(`fence edit journal ${this.file}: ${errorText(err)}`, { cause: err });
    }
    this.torn = false;
    this.lines++;
    this.ids.add(editId(edit)!);
    if (this.lines > 2 * this.ids.size + COMPACT_SLACK_LINES) this.compact();
  }

  /** Empties the journal (after a reload: the reloaded fences are the new base). */
  reset(): void {
    this.reopen([]);
  }

  /** Closes the file. */
  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
  }

  /** Rewrites the journal as the last edit of each id. */
  private compact(): void {
    this.reopen(readFenceEditJournal(this.file).edits);
  }

  private reopen(edits: readonly StoredFenceEdit[]): void {
    this.close();
    try {
      FenceEditJournal.write(this.file, edits);
    } catch (err) {
      throw new Error(`fence edit journal ${this.file}: ${errorText(err)}`, { cause: err });
    } finally {
      this.fd = fs.openSync(this.file, 'a');
    }
    this.lines = edits.length;
    this.ids.clear();
    for (const e of edits) this.ids.add(editId(e)!);
  }

  private static write(file: string, edits: readonly StoredFenceEdit[]): void {
    let text = `${HEADER}\n`;
    for (const e of edits) text += `${JSON.stringify(e)}\n`;
    replaceFileDurably(file, Buffer.from(text, 'utf8'));
  }
}
