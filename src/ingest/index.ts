/**
 * Ingest: the edge of the router, run by the ingest thread. Owns framing and decoding of MessagePack telemetry
 * (wire-format.ts documents the contract), validation and rejection counting, the device registry and shared id
 * table, shard choice, lane classification, the sources (TCP, file / stdin replay, in-process), and writing an
 * admitted ping into its telemetry ring record. Admission itself (admission.ts, token-bucket.ts) sits between the
 * edge's PingSink and the ring.
 */
export * from './wire-format.js';
export * from './ping-fields.js';
export * from './frame-walker.js';
export { FrameDecoder, FrameStream, isStructuralReject, type FrameDecoderOptions, type FrameSink } from './frame-decoder.js';
export * from './device-registry.js';
export * from './lane-classifier.js';
export * from './reject-log.js';
export * from './reject-detail.js';
export * from './pipeline-region.js';
export * from './ingest-edge.js';
export * from './telemetry-record.js';
export * from './sources/source.js';
export * from './sources/tcp-source.js';
export * from './sources/stream-source.js';
export * from './backpressure.js';
export * from './shed-alarm.js';
