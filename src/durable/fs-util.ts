/**
 * Small synchronous file helpers shared by the durable stores (dispatcher thread and main thread): whole writes and
 * reads at a position, directory fsync, and a crash-safe whole-file replace.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

/** Writes `length` bytes of `bytes` from `offset` at file position `position`, looping over short writes. */
export function writeFully(fd: number, bytes: Uint8Array, offset: number, length: number, position: number): void {
  let done = 0;
  while (done < length) done += fs.writeSync(fd, bytes, offset + done, length - done, position + done);
}

/** Reads up to `length` bytes at `position` into `bytes` from `offset`; returns the bytes read (less at the end). */
export function readFully(fd: number, bytes: Uint8Array, offset: number, length: number, position: number): number {
  let done = 0;
  while (done < length) {
    const n = fs.readSync(fd, bytes, offset + done, length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

/** fsyncs a directory so entries created, renamed or removed in it are durable (best effort where unsupported). */
export function syncDir(dir: string): void {
  let fd = -1;
  try {
    fd = fs.openSync(dir, 'r');
    fs.fsyncSync(fd);
  } catch {
    // Some platforms cannot fsync a directory; the files' own fsyncs still hold their data.
  } finally {
    if (fd >= 0) fs.closeSync(fd);
  }
}

/**
 * Replaces `file` with `bytes` so that a crash leaves either the old or the new content: write a temporary file
 * beside it, fsync it, rename it over the old one, fsync the directory.
 */
export function replaceFileDurably(file: string, bytes: Uint8Array): void {
  const tmp = `${file}.tmp`;
  const fd = fs.openSync(tmp, 'w');
  try {
    writeFully(fd, bytes, 0, bytes.length, 0);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(tmp, file);
  syncDir(path.dirname(file));
}

/** `syncDir` off the event loop. */
export async function syncDirAsync(dir: string): Promise<void> {
  let handle: fs.promises.FileHandle | null = null;
  try {
    handle = await fs.promises.open(dir, 'r');
    await handle.sync();
  } catch {
    // As syncDir.
  } finally {
    await handle?.close();
  }
}

/** `replaceFileDurably` with the write, the fsyncs and the rename done off the event loop (libuv's pool). */
export async function replaceFileDurablyAsync(file: string, bytes: Uint8Array): Promise<void> {
  const tmp = `${file}.tmp`;
  const handle = await fs.promises.open(tmp, 'w');
  try {
    let at = 0;
    while (at < bytes.length) {
      const { bytesWritten } = await handle.write(bytes, at, bytes.length - at, at);
      at += bytesWritten;
    }
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fs.promises.rename(tmp, file);
  await syncDirAsync(path.dirname(file));
}

/** Removes a file if it exists and makes the removal durable. */
export function removeDurably(file: string): void {
  try {
    fs.unlinkSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  syncDir(path.dirname(file));
}

/** A name safe as a file name: characters outside `A-Za-z0-9._-` become `_`. */
export function safeFileName(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]/g, '_');
}

/** A short description of a failed file operation: the error code and message (`ENOSPC: no space left on device, write`). */
export function errorText(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  if (e === null || typeof e !== 'object') return String(err);
  return e.code !== undefined && !e.message.startsWith(e.code) ? `${e.code}: ${e.message}` : e.message;
}

/** Name of numbered file `n` of a series (`prefix` + 12-digit number + `suffix`: names sort as numbers). */
export function numberedFileName(prefix: string, n: number, suffix: string): string {
  return `${prefix}${String(n).padStart(12, '0')}${suffix}`;
}

/** Numbers (positive safe integers) of the files of a series in `dir`, ascending; none when `dir` cannot be read. */
export function listNumberedFiles(dir: string, prefix: string, suffix: string): number[] {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const n of names) {
    if (!n.startsWith(prefix) || !n.endsWith(suffix)) continue;
    const v = Number(n.slice(prefix.length, -suffix.length));
    if (Number.isSafeInteger(v) && v > 0) out.push(v);
  }
  return out.sort((a, b) => a - b);
}
