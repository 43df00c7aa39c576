/**
 * Writes the README's options table from the option definition (run `npm run build` first): the rows between the
 * markers `<!-- options:begin -->` and `<!-- options:end -->` are replaced. `npm test` checks that they match
 * (test/config/option-definition.test.ts).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { optionsMarkdown } from '../../dist/src/option-schema/option-docs.js';
import { ROUTER_SPEC } from '../../dist/src/config/router-option-spec.js';

const BEGIN = '<!-- options:begin -->';
const END = '<!-- options:end -->';
const readme = readFileSync('README.md', 'utf8');
const a = readme.indexOf(BEGIN);
const b = readme.indexOf(END);
if (a < 0 || b < a) {
  process.stderr.write(`README.md has no ${BEGIN} ... ${END} section\n`);
  process.exit(1);
}
const next = `${readme.slice(0, a + BEGIN.length)}\n${optionsMarkdown(ROUTER_SPEC)}\n${readme.slice(b)}`;
writeFileSync('README.md', next);
process.stdout.write(next === readme ? 'README options table: unchanged\n' : 'README options table: written\n');
