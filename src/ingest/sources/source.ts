/**
 * The source contract (ingest thread): anything that produces telemetry bytes for the ingest edge. A TCP listener,
 * a file or stdin replay, and later a partition consumer of a distributed log (each message: `edge.ingest(value)`,
 * or one `openStream` per partition) all fit behind it.
 */
import type { IngestEdge } from '../ingest-edge.js';

/** A telemetry source. */
export interface TelemetrySource {
  /** Name for logs. */
  readonly name: string;
  /** Starts producing into `edge`; resolves once the source is ready (listening, opened). */
  start(edge: IngestEdge): Promise<void>;
  /** Stops taking new input and ends open streams; resolves when every stream has ended. */
  stop(): Promise<void>;
}
