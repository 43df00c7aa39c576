/**
 * Every metric name of the router, in one place (Prometheus conventions: snake_case, `_total` for counters, the unit
 * as a suffix).
 */
export const MetricNames = {
  INGEST_RECEIVED_BYTES: 'geofence_ingest_received_bytes_total',
  INGEST_FRAMES: 'geofence_ingest_frames_total',
  INGEST_ACCEPTED: 'geofence_ingest_accepted_total',
  INGEST_REJECTED: 'geofence_ingest_rejected_total',
  INGEST_RESYNCS: 'geofence_ingest_resyncs_total',
  INGEST_RESYNC_SKIPPED_BYTES: 'geofence_ingest_resync_skipped_bytes_total',
  INGEST_CONNECTIONS_OPENED: 'geofence_ingest_connections_opened_total',
  INGEST_CONNECTIONS_CLOSED: 'geofence_ingest_connections_closed_total',
  INGEST_CONNECTIONS_REFUSED: 'geofence_ingest_connections_refused_total',
  INGEST_OPEN_CONNECTIONS: 'geofence_ingest_open_connections',
  DEVICES: 'geofence_devices',
  PINGS_OFFERED: 'geofence_pings_offered_total',
  PINGS_ADMITTED: 'geofence_pings_admitted_total',
  PINGS_SHED: 'geofence_pings_shed_total',
  RING_DEPTH: 'geofence_ring_depth_slots',
  RING_CAPACITY: 'geofence_ring_capacity_slots',
  FENCE_GENERATION: 'geofence_fence_generation',
  DRAINING: 'geofence_draining',
} as const;
