/**
 * ESLint's configuration for `npm test` (run as `eslint --config test/lint/eslint.config.mjs`): typescript-eslint's
 * recommended rules over the sources, tests and benchmarks. The type checker (tsconfig.json, strict, with
 * noUncheckedIndexedAccess) covers what needs types; these rules cover habits it does not see.
 */
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    rules: {
      // The compiler reports unused locals and parameters (noUnusedLocals, noUnusedParameters).
      '@typescript-eslint/no-unused-vars': 'off',
      'no-constant-condition': ['error', { checkLoops: false }],
      // `x != null` (null or undefined) stays the one loose comparison allowed.
      eqeqeq: ['error', 'always', { null: 'ignore' }],
      'no-var': 'error',
      'prefer-const': 'error',
    },
  },
  {
    files: ['**/*.mjs'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly' } },
  },
);
