/**
 * The embedded demo (`geofence-router --demo`, `npm start`), run on the main thread of the command line: a synthetic
 * city, a simulated fleet over the router's real TCP listener, simulated downstreams and status lines. Also home of
 * the seeded fleet and its MessagePack encoder, which the load generator (bench/loadgen) uses too.
 */
export { startDemo, DEMO_DEFAULTS, DEMO_SERVICE_NAME, DEMO_AUDIT_NAME, type DemoSettings, type RunningDemo } from './run-demo.js';
export { DemoTraffic, DEMO_TRAFFIC_DEFAULTS, type DemoTrafficOptions } from './traffic.js';
export { SimulatedService, SIMULATED_SERVICE_DEFAULTS, validateSimulatedServiceOptions, type SimulatedServiceOptions } from './simulated-service.js';
export { Fleet, FLEET_DEFAULTS, MOVING_SPEED_MPS, mulberry32, type FleetOptions, type FleetPing } from './fleet.js';
export { encodePingInto, MAX_PING_BYTES, type LoadEncoding } from './encode.js';
