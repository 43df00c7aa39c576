/**
 * Live edits kept across restarts: the edits applied since the last reload are stored (durable/fence-edit-journal.ts)
 * as their GeoJSON, and at the next start they are validated again and applied over the fences the router starts
 * with, in the order they were made, in the same build (no generation per edit).
 */
import { FenceValidationError, parseFence, type FenceLimits, type ParsedFence } from './parse.js';

/** A stored edit: the GeoJSON Feature of an upsert as it was given, or the id of a fence removed. */
export type StoredFenceEdit = { upsert: unknown } | { remove: string };

/** `base` with the stored edits applied, and the edits that could not be (each with why). */
export interface EditedFences {
  /** Fences in force: the base's order, replaced fences in place, added ones after, in the order they were added. */
  fences: ParsedFence[];
  /** One line per stored edit that no longer validates (a limit lowered since it was made), in journal order. */
  skipped: string[];
}

/**
 * Applies `edits` over `base` (upsert: replace in place or append; remove: drop, a no-op for an id not there).
 * An upsert whose feature fails validation now is skipped and described in `skipped`; the others still apply.
 */
export function applyStoredEdits(
  base: readonly ParsedFence[],
  edits: readonly StoredFenceEdit[],
  limits: FenceLimits,
): EditedFences {
  const slots: (ParsedFence | null)[] = [...base];
  const at = new Map<string, number>();
  for (let i = 0; i < slots.length; i++) at.set(slots[i]!.id, i);
  const skipped: string[] = [];
  edits.forEach((edit, n) => {
    if ('remove' in edit) {
      const i = at.get(edit.remove);
      if (i !== undefined) {
        slots[i] = null;
        at.delete(edit.remove);
      }
      return;
    }
    let fence: ParsedFence;
    try {
      fence = parseFence(edit.upsert, limits);
    } catch (err) {
      const why = err instanceof FenceValidationError ? err.errors.map((e) => e.reason).join('; ') : String(err);
      skipped.push(`stored edit ${n + 1} (upsert${describeId(edit.upsert)}): ${why}`);
      return;
    }
    const i = at.get(fence.id);
    if (i !== undefined) slots[i] = fence;
    else {
      at.set(fence.id, slots.length);
      slots.push(fence);
    }
  });
  return { fences: slots.filter((f): f is ParsedFence => f !== null), skipped };
}

/** ` of "id"` when the feature names one. */
function describeId(feature: unknown): string {
  const props = (feature as { properties?: { id?: unknown } } | null)?.properties;
  return typeof props?.id === 'string' ? ` of ${JSON.stringify(props.id)}` : '';
}
