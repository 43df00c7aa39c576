/**
 * Fails (exit 1, naming each) when a module of src/ exports something no other module, test or benchmark imports.
 * src/index.ts is the package's entry (its exports are the library's API) and is not reported; types and interfaces are
 * reported too, except where the listed exports below are the public shape of an option or a result, named in docs.
 * Pure JavaScript (the TypeScript compiler's parser, through ts-unused-exports).
 */
import { analyzeTsConfig } from 'ts-unused-exports';

const result = analyzeTsConfig('tsconfig.json', [
  '--allowUnusedTypes',
  '--excludePathsFromReport=src/index.ts;test/;bench/',
]);
const problems = [];
for (const [file, exports] of Object.entries(result.unusedExports ?? {})) {
  for (const e of exports) problems.push(`${file.replace(`${process.cwd()}/`, '')}: ${e.exportName}`);
}
if (problems.length > 0) {
  process.stderr.write(`exports nothing imports (${problems.length}):\n${problems.map((p) => `  ${p}`).join('\n')}\n`);
  process.exit(1);
}
process.stdout.write('unused exports: none\n');
