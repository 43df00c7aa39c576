/**
 * Configuration (main thread): router options with defaults and validation, the JSON config file, and the
 * command-line flags, merged as defaults < file < flags.
 */
export * from './options.js';
export * from './config-file.js';
export * from './cli-args.js';
