/**
 * Admin (main thread): the HTTP server for /metrics, /healthz, /readyz and POST /admin/reload-fences.
 */
export * from './admin-server.js';
