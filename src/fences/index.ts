/**
 * Fences and containment.
 *
 * Owns: GeoJSON fence loading and validation (`parseFences`), the shared fence store (`buildFenceStore` on the main
 * thread, `FenceStore.open` zero-copy in any thread), the allocation-free point query and exact containment, the
 * per-thread query accelerators built when a thread opens a store (`FenceGrid`: a uniform grid over fence boxes in
 * front of the flatbush walk; `RingBands`: latitude bands over polygon edges for the exact tests), the
 * per-device trigger state machine over shared memory (`DeviceState`, `ContainmentEngine`), carrying device state
 * across a store reload (`reloadDeviceState`), and a seeded synthetic city for benchmarks and the demo.
 *
 * Threads: the main thread parses, builds and reloads; containment pool workers run `ContainmentEngine.processBatch`
 * on one shard's batch at a time; the ingest thread calls `FenceStore.nearCompliance` and
 * `DeviceState.insideCompliance` to classify lanes. Boundary rule: see geometry.ts (closed fences, open holes).
 */
export { parseFences, FenceValidationError } from './parse.js';
export type { ParsedFence, ParsedFences, FenceProblem } from './parse.js';
export { buildFenceStore, FenceStore } from './store.js';
export type { FenceStoreDescriptor, FenceStoreOptions, FenceStoreOpenOptions } from './store.js';
export { allocateDeviceState, DeviceState } from './device-state.js';
export type { DeviceStateDescriptor } from './device-state.js';
export { ContainmentEngine } from './engine.js';
export { reloadDeviceState } from './reload.js';
export type { ReloadOptions } from './reload.js';
export { EARTH_RADIUS_M, M_PER_DEG, segmentsIntersect } from './geometry.js';
export { generateSyntheticCity, syntheticCityBounds, mulberry32 } from './synthetic-city.js';
export type { SyntheticCityOptions, CityBounds, FeatureCollectionJson } from './synthetic-city.js';
