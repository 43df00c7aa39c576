/**
 * Subject and topic templates of the broker sinks: `geofence.{type}.{fenceId}` names each trigger's subject (NATS) or
 * topic (MQTT) from its fields. Placeholders: `{type}`, `{fenceId}`, `{deviceId}`, `{lane}`. A substituted value keeps
 * letters, digits, `-` and `_`; any other character (the separators and wildcards of both brokers among them) becomes
 * `_`, so a fence id can never add a level or a wildcard.
 */
import { LANE_NAMES, TRIGGER_TYPE_NAMES } from '../../shm/layout.js';
import type { TriggerBatch } from './trigger-batch.js';

/** The placeholders a template may use. */
const TEMPLATE_FIELDS = ['type', 'fenceId', 'deviceId', 'lane'] as const;
type Field = (typeof TEMPLATE_FIELDS)[number];

/** Which broker's names a template makes: NATS subjects (`.`-separated tokens) or MQTT topics (`/`-separated levels). */
export type TemplateBroker = 'nats' | 'mqtt';

/**
 * Why the template `probe` (its placeholders already stood in for by a plain token) cannot name a message `broker`
 * takes for publishing, or null. NATS: no white space, no empty token, no wildcard token (`*`, `>`); MQTT: no
 * wildcard (`+`, `#`), no NUL, and no leading `$` (the broker's own topics, such as `$SYS`).
 */
function brokerProblem(broker: TemplateBroker, probe: string): string | null {
  if (broker === 'nats') {
    if (/\s/.test(probe)) return 'a NATS subject cannot hold white space';
    const tokens = probe.split('.');
    if (tokens.some((t) => t.length === 0))
      return 'a NATS subject has no empty token (a leading, trailing or doubled ".")';
    if (tokens.some((t) => t === '*' || t === '>'))
      return 'a message cannot be published to a wildcard token ("*" or ">")';
    return null;
  }
  if (/[+#]/.test(probe)) return 'a message cannot be published to an MQTT topic holding a wildcard ("+" or "#")';
  if (probe.includes('\u0000')) return 'an MQTT topic cannot hold NUL';
  if (probe.startsWith('$')) return 'MQTT topics starting with "$" are the broker\'s own ($SYS)';
  return null;
}

/** A parsed template: literal parts between placeholders. */
export class SubjectTemplate {
  /** The template text. */
  readonly text: string;
  private readonly literals: string[] = [];
  private readonly fields: Field[] = [];

  /**
   * Parses `text`; an unknown placeholder, an unclosed brace, or literal text `broker` cannot publish to (see
   * brokerProblem) is an error naming `option`.
   */
  constructor(option: string, text: string, broker: TemplateBroker) {
    this.text = text;
    const re = /\{([^{}]*)\}/g;
    let at = 0;
    for (let m = re.exec(text); m !== null; m = re.exec(text)) {
      const name = m[1] as Field;
      if (!TEMPLATE_FIELDS.includes(name))
        throw new RangeError(
          `${option}: unknown placeholder {${m[1]}} in ${JSON.stringify(text)} (known: ${TEMPLATE_FIELDS.map((f) => `{${f}}`).join(', ')})`,
        );
      this.literals.push(text.slice(at, m.index));
      this.fields.push(name);
      at = m.index + m[0].length;
    }
    const tail = text.slice(at);
    if (/[{}]/.test(tail) || this.literals.some((l) => /[{}]/.test(l)))
      throw new RangeError(`${option}: unbalanced brace in ${JSON.stringify(text)}`);
    this.literals.push(tail);
    if (text.length === 0) throw new RangeError(`${option} must not be empty`);
    const problem = brokerProblem(broker, this.literals.join('x'));
    if (problem !== null) throw new RangeError(`${option} ${JSON.stringify(text)}: ${problem}`);
  }

  /** The literal text before the first placeholder (what every subject starts with). */
  get prefix(): string {
    return this.literals[0]!;
  }

  /** The subject of record `i` of `batch`. */
  render(batch: TriggerBatch, i: number): string {
    let s = this.literals[0]!;
    for (let k = 0; k < this.fields.length; k++)
      s += safeToken(valueOf(this.fields[k]!, batch, i)) + this.literals[k + 1]!;
    return s;
  }
}

function valueOf(field: Field, batch: TriggerBatch, i: number): string {
  switch (field) {
    case 'type':
      return TRIGGER_TYPE_NAMES[batch.type(i)] ?? String(batch.type(i));
    case 'fenceId':
      return batch.fenceId(i);
    case 'deviceId':
      return String(batch.deviceId(i));
    case 'lane':
      return LANE_NAMES[batch.lane(i)] ?? String(batch.lane(i));
  }
}

/** `value` with every character other than a letter, digit, `-` or `_` replaced by `_` (empty: `_`). */
export function safeToken(value: string): string {
  const s = value.replace(/[^A-Za-z0-9_-]/g, '_');
  return s.length === 0 ? '_' : s;
}
