/**
 * Metrics (main thread): the prom-client registry of the router, every value read from shared memory at scrape
 * time, and the metric names.
 */
export * from './metric-names.js';
export * from './router-metrics.js';
