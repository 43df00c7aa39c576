/**
 * Every on-disk layout of the router, in one place: the trigger record shared by the backlog log, the dead-letter
 * file and the pending file; the headers of those files; the backlog cursor; the device-state checkpoint; the
 * progress mark. Nothing else computes a byte offset into a durable file.
 *
 * Conventions: little-endian (the router refuses to start on a big-endian host); every record and section starts
 * at a multiple of 8 bytes, so a record can be read through Int32Array / Float64Array views of an aligned buffer
 * without a DataView; `*_U8` / `*_U16` / `*_U32` / `*_F64` constants are byte offsets, `*_W` constants are Int32 word
 * indices. Checksums are FNV-1a over Int32 words (`checksumWords`).
 */

/** Version of every layout in this file; bumped whenever any offset changes. */
export const FILE_LAYOUT_VERSION = 1;

// ---------------------------------------------------------------------------------------------------------------
// File header: the first FILE_HEADER_BYTES of every backlog segment, dead-letter file and pending file.
// ---------------------------------------------------------------------------------------------------------------

/** Bytes of a file header. */
export const FILE_HEADER_BYTES = 64;
/** Word of the magic number. */
export const FH_MAGIC_W = 0;
/** Word of the layout version. */
export const FH_VERSION_W = 1;
/** Word of the hash of the downstream's name (a file never serves another downstream). */
export const FH_NAME_HASH_W = 2;
/** Byte offset of the segment number (backlog segments; 0 elsewhere), Float64. */
export const FH_SEGMENT_F64 = 16;
/** Byte offset of the wall time the file was created, epoch ms, Float64. */
export const FH_CREATED_MS_F64 = 24;

/** Magic of a backlog log segment ("GRBL"). */
export const BACKLOG_MAGIC = 0x4752424c;
/** Magic of a dead-letter file ("GRDL"). */
export const DEAD_LETTER_MAGIC = 0x4752444c;
/** Magic of a pending file ("GRPF"). */
export const PENDING_MAGIC = 0x47525046;
/** Magic of a set-aside file of a backlog log ("GRSA"). */
export const SET_ASIDE_MAGIC = 0x47525341;

// ---------------------------------------------------------------------------------------------------------------
// Trigger record: a trigger with the ids a receiver knows (never a slot or index of one process alone), plus the
// slot and fence handle of the run that wrote it (a shortcut for that run only, checked against the run id).
// Variable length: a fixed head, then the device id bytes, the fence id bytes and the tags (a JSON array), padded.
// ---------------------------------------------------------------------------------------------------------------

/** Bytes of the fixed head of a trigger record. */
export const TREC_HEAD_BYTES = 96;
/** Total bytes of the record (a multiple of 8). */
export const TREC_TOTAL_BYTES_W = 0;
/** Checksum of words [TREC_CHECKSUM_FROM_W, total / 4). */
export const TREC_CHECKSUM_W = 1;
/**
 * Dead-letter status word (encodeDeadLetterStatus below), rewritten in place; outside the checksum, it carries its own
 * check. 0 in other files.
 */
export const TREC_STATUS_W = 2;
/** First word covered by the checksum. */
export const TREC_CHECKSUM_FROM_W = 3;
/** Trigger type (TriggerType). */
export const TREC_TYPE_U8 = 12;
/** Lane of the trigger (its fence's class). */
export const TREC_LANE_U8 = 13;
/** Dead-letter reason (DeadLetterReason), or TREC_NO_REASON. */
export const TREC_REASON_U8 = 14;
/** Kind of the device id: TREC_ID_STRING or TREC_ID_NUMBER. */
export const TREC_ID_KIND_U8 = 15;
/** Delivery attempts made so far. */
export const TREC_ATTEMPTS_W = 4;
/** Id of the run that wrote the record (a random 32-bit number per dispatcher start). */
export const TREC_RUN_ID_W = 5;
/** Device slot in that run. */
export const TREC_DEVICE_SLOT_W = 6;
/** Fence handle in that run. */
export const TREC_FENCE_HANDLE_W = 7;
/** UTF-8 bytes of a string device id (0 for a numeric id). */
export const TREC_DEVICE_ID_BYTES_U16 = 32;
/** UTF-8 bytes of the fence id. */
export const TREC_FENCE_ID_BYTES_U16 = 34;
/** UTF-8 bytes of the tags (a JSON array of strings). */
export const TREC_TAGS_BYTES_W = 9;
/** Latitude of the ping, Float64. */
export const TREC_LAT_F64 = 40;
/** Longitude of the ping. */
export const TREC_LON_F64 = 48;
/** Event time of the ping, epoch ms. */
export const TREC_EVENT_TIME_MS_F64 = 56;
/** The device's trigger sequence number. */
export const TREC_SEQ_F64 = 64;
/** Milliseconds inside the fence. */
export const TREC_INSIDE_MS_F64 = 72;
/** Wall time the ping was admitted, epoch ms (held time survives a restart). */
export const TREC_ADMIT_WALL_MS_F64 = 80;
/** A numeric device id (unsigned integer); -1 for a string id. */
export const TREC_NUMERIC_ID_F64 = 88;
/** Device id kind: a string. */
export const TREC_ID_STRING = 1;
/** Device id kind: an unsigned integer. */
export const TREC_ID_NUMBER = 2;
/** TREC_REASON_U8 of a record that was never dead-lettered. */
export const TREC_NO_REASON = 255;
/**
 * Largest trigger record, with room to spare: the head (96), a device id (at most 1024 UTF-8 bytes), a fence id (256
 * characters, at most 1024 bytes) and the tags (at most 8192 bytes of JSON, checked when fences are parsed).
 */
export const TREC_MAX_BYTES = 16 * 1024;

// ---------------------------------------------------------------------------------------------------------------
// Backlog cursor: where the next undelivered record of the backlog log starts. Two copies of CURSOR_BYTES each, written
// in turn (commit n goes to copy n & 1), each with its commit number, a magic and a checksum: a copy torn or damaged
// leaves the other, one commit older, so a damaged cursor costs at most one commit interval of re-delivery, never the
// whole log. A file of one bare 32-byte copy (checksum in word 4, no magic or commit number) is the form an earlier
// layout wrote; it is still read.
// ---------------------------------------------------------------------------------------------------------------

/** Bytes of one cursor copy. */
export const CURSOR_BYTES = 32;
/** Copies of the cursor in the file (copy k at byte k * CURSOR_BYTES). */
export const CURSOR_COPIES = 2;
/** Bytes of the cursor file. */
export const CURSOR_FILE_BYTES = CURSOR_BYTES * CURSOR_COPIES;
/** Segment number of the cursor, Float64. */
export const CURSOR_SEGMENT_F64 = 0;
/** Byte offset in that segment, Float64. */
export const CURSOR_OFFSET_F64 = 8;
/** Commit number of the copy (rises with every commit; the higher valid copy wins), Float64. */
export const CURSOR_COMMIT_F64 = 16;
/** Word of the checksum of words 0 .. CURSOR_CHECKSUM_W - 1. */
export const CURSOR_CHECKSUM_W = 6;
/** Word of the magic. */
export const CURSOR_MAGIC_W = 7;
/** Magic of a cursor copy ("GRCU"). */
export const CURSOR_MAGIC = 0x47524355;
/** Word of the checksum (of words 0..3) in the single-copy form an earlier layout wrote. */
export const CURSOR_LEGACY_CHECKSUM_W = 4;

// ---------------------------------------------------------------------------------------------------------------
// Dead-letter status word (TREC_STATUS_W of a dead-letter record), rewritten in place and outside the record's
// checksum, so it carries its own check: the status in byte 0, its complement in byte 1 and DL_STATUS_TAG in the
// high half. One damaged byte never turns one valid status into another; a word that fails the check is reported as
// damaged (and read as PENDING: a re-delivery, which receivers de-duplicate by seq, rather than a silent loss). The
// bare values 0..2 an earlier layout wrote are still read.
// ---------------------------------------------------------------------------------------------------------------

/** High half of an encoded dead-letter status word. */
const DL_STATUS_TAG = 0x4453;
/** Status values a status word can hold (DeadLetterStatus: PENDING, RESOLVED, FINAL). */
const DL_STATUS_COUNT = 3;

/** The status word of dead-letter status `status`. */
export function encodeDeadLetterStatus(status: number): number {
  return (DL_STATUS_TAG << 16) | ((~status & 0xff) << 8) | (status & 0xff);
}

/** The status a status word holds, or -1 when the word is damaged. */
export function decodeDeadLetterStatus(word: number): number {
  if (word >= 0 && word < DL_STATUS_COUNT) return word;
  const s = word & 0xff;
  if (word >>> 16 !== DL_STATUS_TAG || ((word >>> 8) & 0xff) !== (~s & 0xff) || s >= DL_STATUS_COUNT) return -1;
  return s;
}

// ---------------------------------------------------------------------------------------------------------------
// Checkpoint of the device state: a header, the table of the fences devices are inside (by id), then one record per
// device (by id). Written whole to a temporary file, fsynced and renamed over the previous one.
// ---------------------------------------------------------------------------------------------------------------

/** Magic of a checkpoint ("GRCK"). */
export const CHECKPOINT_MAGIC = 0x4752434b;
/** Bytes of the checkpoint header. */
export const CKPT_HEADER_BYTES = 72;
/** Word of the magic. */
export const CKPT_MAGIC_W = 0;
/** Word of the layout version. */
export const CKPT_VERSION_W = 1;
/** Word of the checksum of every word after the header's first line (words 4 .. end). */
export const CKPT_CHECKSUM_W = 2;
/** Word of the flags (CKPT_FLAG_*). */
export const CKPT_FLAGS_W = 3;
/** Wall time the state was captured, epoch ms, Float64. */
export const CKPT_CAPTURED_MS_F64 = 16;
/** Floor of every seq issued after this checkpoint (see src/durable/checkpoint.ts), Float64. */
export const CKPT_SEQ_FLOOR_F64 = 24;
/** Checkpoint number: increases by one with every checkpoint of the state directory, Float64. */
export const CKPT_NUMBER_F64 = 32;
/** Pings processed by the run that wrote it, at the capture, Float64. */
export const CKPT_PINGS_PROCESSED_F64 = 40;
/** Word of the device count. */
export const CKPT_DEVICE_COUNT_W = 12;
/** Word of the fence table's entry count. */
export const CKPT_FENCE_COUNT_W = 13;
/** Word of the byte length of the whole file. */
export const CKPT_TOTAL_BYTES_W = 14;
/** Triggers produced by the run that wrote it, at the capture, Float64. */
export const CKPT_TRIGGERS_PRODUCED_F64 = 64;
/** Flag: written at a clean stop, after the pipeline drained (nothing happened after it). */
export const CKPT_FLAG_CLEAN = 1;

/** Fence table entry head: id bytes (u16), flags (u16), tags bytes (u32); then the bytes, padded to 8. */
export const CKPT_FENCE_HEAD_BYTES = 8;
/** Fence table entry flag: a compliance fence. */
export const CKPT_FENCE_COMPLIANCE = 1;

/**
 * Device record: a 48-byte head (id kind u8 at 0, has-last u8 at 1, id bytes u16 at 2, entry count u16 at 4, flags u8
 * at 6; numeric id, last event time, last latitude, last longitude and last seq as Float64 at 8, 16, 24, 32, 40), then
 * the string id's UTF-8 bytes padded to 8, then the entries.
 */
export const CKPT_DEVICE_HEAD_BYTES = 48;
/** Byte offset (in the device head) of the id kind. */
export const CKPT_DEV_KIND_U8 = 0;
/** Byte offset of the has-last flag. */
export const CKPT_DEV_HAS_LAST_U8 = 1;
/** Byte offset of the id byte length (u16). */
export const CKPT_DEV_ID_BYTES_U16 = 2;
/** Byte offset of the entry count (u16). */
export const CKPT_DEV_ENTRIES_U16 = 4;
/** Byte offset of the device flags (CKPT_DEV_EXPIRING, CKPT_DEV_UNTRACKED; 0 in files written before the flags). */
export const CKPT_DEV_FLAGS_U8 = 6;
/**
 * Device flag: the device was expiring when copied (marked expired, its expiry not processed yet): a restore ends its
 * stays as that expiry would have (see restoreDevices in pipeline/state-keeper.ts).
 */
export const CKPT_DEV_EXPIRING = 1;
/**
 * Device flag: its last ping found it inside a fence it could not track (DEV_UNTRACKED_I32): after a restore its next
 * ping still takes no such fence up late and says nothing when it leaves one (no CROSS), as it would have without the
 * restart.
 */
export const CKPT_DEV_UNTRACKED = 2;
/** Numeric id (Float64; -1 for a string id). */
export const CKPT_DEV_NUMERIC_ID_F64 = 8;
/** Last accepted ping's event time, epoch ms. */
export const CKPT_DEV_LAST_EVENT_MS_F64 = 16;
/** Last latitude. */
export const CKPT_DEV_LAST_LAT_F64 = 24;
/** Last longitude. */
export const CKPT_DEV_LAST_LON_F64 = 32;
/** Last trigger seq issued. */
export const CKPT_DEV_SEQ_F64 = 40;
/** Entry (24 bytes): fence table index (u32), EntryState bits (u32), stay start (Float64), pending start (Float64). */
export const CKPT_ENTRY_BYTES = 24;
/** Byte offset (in an entry) of the fence table index. */
export const CKPT_ENTRY_FENCE_U32 = 0;
/** Byte offset of the state bits. */
export const CKPT_ENTRY_STATE_U32 = 4;
/** Byte offset of the stay start, epoch ms. */
export const CKPT_ENTRY_SINCE_MS_F64 = 8;
/** Byte offset of the pending-transition start, epoch ms. */
export const CKPT_ENTRY_PENDING_MS_F64 = 16;

// ---------------------------------------------------------------------------------------------------------------
// Progress mark: a small file rewritten in place a few times a second (no fsync: it survives a process crash, which
// is what it is for). After an unclean stop it tells how much happened after the last checkpoint.
// ---------------------------------------------------------------------------------------------------------------

/** Magic of a progress mark ("GRPM"). */
export const PROGRESS_MAGIC = 0x4752504d;
/** Bytes of the progress mark. */
export const PROGRESS_BYTES = 64;
/** Word of the magic. */
export const PROG_MAGIC_W = 0;
/** Word of the checksum of words 4 .. 15. */
export const PROG_CHECKSUM_W = 1;
/** Wall time of the mark, epoch ms, Float64. */
export const PROG_WALL_MS_F64 = 16;
/** Pings processed by the run so far. */
export const PROG_PINGS_PROCESSED_F64 = 24;
/** Triggers produced by the run so far. */
export const PROG_TRIGGERS_F64 = 32;
/** Triggers the dispatcher held in memory that no durable file held (what a crash loses of them). */
export const PROG_TRIGGERS_IN_MEMORY_F64 = 40;
/** Number of the last checkpoint written. */
export const PROG_CHECKPOINT_NUMBER_F64 = 48;
/** Wall time the run started, epoch ms. */
export const PROG_RUN_START_MS_F64 = 56;

/** FNV-1a over Int32 words [fromWord, toWord) of `words`, byte by byte, little end first. Allocation-free. */
export function checksumWords(words: Int32Array, fromWord: number, toWord: number): number {
  let h = 0x811c9dc5 | 0;
  for (let k = fromWord; k < toWord; k++) {
    const v = words[k]!;
    h = Math.imul(h ^ (v & 0xff), 0x01000193);
    h = Math.imul(h ^ ((v >>> 8) & 0xff), 0x01000193);
    h = Math.imul(h ^ ((v >>> 16) & 0xff), 0x01000193);
    h = Math.imul(h ^ (v >>> 24), 0x01000193);
  }
  return h;
}

/** 32-bit FNV-1a of a string's UTF-16 code units (names a downstream inside its files). */
export function hashName(name: string): number {
  let h = 0x811c9dc5 | 0;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h;
}

/** Rounds a byte count up to a multiple of 8. */
export function align8(n: number): number {
  return (n + 7) & ~7;
}
