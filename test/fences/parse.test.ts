import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FenceStore, FenceValidationError, buildFenceStore, parseFences } from '../../src/fences/index.js';
import { at, circle, collection, square } from './helpers.js';

const ring = (): number[][] => (square('x', 0, 0, 50)['geometry'] as { coordinates: number[][][] }).coordinates[0]!;
const poly = (id: string, coordinates: unknown, props: Record<string, unknown> = {}): Record<string, unknown> => ({
  type: 'Feature',
  properties: { id, ...props },
  geometry: { type: 'Polygon', coordinates },
});

/** Each bad feature sits at index 1 behind a good one, and must be named with its reason. */
const cases: [string, Record<string, unknown>, RegExp][] = [
  [
    'unclosed ring',
    poly('b', [
      ring()
        .slice(0, 4)
        .concat([[13.5, 52.6]]),
    ]),
    /polygon ring 0 is not closed/,
  ],
  [
    'fewer than 4 positions',
    poly('b', [
      [
        [13.4, 52.5],
        [13.41, 52.5],
        [13.4, 52.5],
      ],
    ]),
    /polygon ring 0 has 3 positions, at least 4 required/,
  ],
  [
    'NaN coordinate',
    poly('b', [
      [
        [13.4, 52.5],
        [Number.NaN, 52.5],
        [13.41, 52.51],
        [13.4, 52.5],
      ],
    ]),
    /position 1 has a non-finite/,
  ],
  [
    'string coordinate',
    poly('b', [
      [
        [13.4, 52.5],
        ['13.41', 52.5],
        [13.41, 52.51],
        [13.4, 52.5],
      ],
    ]),
    /position 1 has a non-finite or non-numeric/,
  ],
  [
    'latitude out of range',
    poly('b', [
      [
        [13.4, 52.5],
        [13.41, 95],
        [13.41, 52.51],
        [13.4, 52.5],
      ],
    ]),
    /latitude 95 is out of range/,
  ],
  [
    'longitude out of range',
    poly('b', [
      [
        [13.4, 52.5],
        [181, 52.5],
        [13.41, 52.51],
        [13.4, 52.5],
      ],
    ]),
    /longitude 181 is out of range/,
  ],
  ['duplicate id', square('a', 500, 0, 10), /duplicate id "a" \(first used by feature 0\)/],
  ['radius on a polygon', square('b', 500, 0, 10, { radius: 30 }), /radius is only meaningful on a Point/],
  [
    'dwellMs below minInsideMs',
    square('b', 500, 0, 10, { dwellMs: 1000, minInsideMs: 5000 }),
    /dwellMs \(1000\) is less than minInsideMs \(5000\)/,
  ],
  [
    'negative exitBufferM',
    square('b', 500, 0, 10, { exitBufferM: -1 }),
    /exitBufferM must be a non-negative finite number, got -1/,
  ],
  ['compliance not boolean', square('b', 500, 0, 10, { compliance: 'yes' }), /compliance must be a boolean, got "yes"/],
  [
    'tags not strings',
    square('b', 500, 0, 10, { tags: [1] }),
    /tags must be an array of at most 32 non-empty strings of at most 128 characters/,
  ],
  [
    'too many tags',
    square('b', 500, 0, 10, { tags: Array.from({ length: 33 }, (_, i) => `t${i}`) }),
    /tags must be an array of at most 32/,
  ],
  ['a tag too long', square('b', 500, 0, 10, { tags: ['x'.repeat(129)] }), /of at most 128 characters/],
  ['missing id', poly('', [ring()]), /id must be a non-empty string/],
  [
    'unsupported geometry',
    {
      type: 'Feature',
      properties: { id: 'b' },
      geometry: {
        type: 'LineString',
        coordinates: [
          [0, 0],
          [1, 1],
        ],
      },
    },
    /geometry type "LineString" is not supported/,
  ],
  ['no geometry', { type: 'Feature', properties: { id: 'b' }, geometry: null }, /has no geometry/],
  ['not a feature', { type: 'Polygon' }, /is not a GeoJSON Feature/],
  [
    'circle without radius',
    { type: 'Feature', properties: { id: 'b' }, geometry: { type: 'Point', coordinates: [13.4, 52.5] } },
    /radius must be a number in \(0, 100000\] metres/,
  ],
  ['circle near the pole', circle('b', 0, 0, 10, {}), /./], // replaced below
  [
    'antimeridian',
    poly('b', [
      [
        [179, 10],
        [-179, 10],
        [-179, 11],
        [179, 10],
      ],
    ]),
    /crossing the antimeridian are not supported/,
  ],
  [
    'hole outside outer',
    poly('b', [
      ring(),
      [
        [13.6, 52.6],
        [13.61, 52.6],
        [13.61, 52.61],
        [13.6, 52.6],
      ],
    ]),
    /polygon ring 1 \(a hole\) has a vertex outside its outer ring/,
  ],
  [
    'bad MultiPolygon part',
    {
      type: 'Feature',
      properties: { id: 'b' },
      geometry: { type: 'MultiPolygon', coordinates: [[ring()], [ring().slice(0, 3)]] },
    },
    /part 1 polygon ring 0 has 3 positions/,
  ],
];
cases[cases.findIndex((c) => c[0] === 'circle near the pole')] = [
  'circle near the pole',
  { type: 'Feature', properties: { id: 'b', radius: 10 }, geometry: { type: 'Point', coordinates: [0, 89] } },
  /latitude 89 is out of the supported range/,
];

for (const [name, feature, reason] of cases) {
  test(`rejects ${name} with the feature index and reason`, () => {
    assert.throws(
      () => parseFences(collection(square('a', 0, 0, 50), feature)),
      (err: unknown) => {
        assert.ok(err instanceof FenceValidationError);
        assert.equal(err.featureIndex, 1);
        assert.match(err.reason, reason);
        assert.match(err.message, /^feature 1: /);
        return true;
      },
    );
  });
}

test('rejects a non-collection and collects every problem', () => {
  assert.throws(() => parseFences({ type: 'Feature' }), /feature collection: input is not a GeoJSON FeatureCollection/);
  assert.throws(() => parseFences({ type: 'FeatureCollection', features: {} }), /features must be an array/);
  try {
    parseFences(
      collection(
        square('a', 0, 0, 5, { dwellMs: -1 }),
        square('b', 0, 0, 5),
        square('c', 0, 0, 5, { compliance: 1, exitBufferM: 'x' }),
      ),
    );
    assert.fail('expected a FenceValidationError');
  } catch (err) {
    assert.ok(err instanceof FenceValidationError);
    assert.deepEqual(
      err.errors.map((e) => e.featureIndex),
      [0, 2, 2],
    );
    assert.equal(err.featureIndex, 0);
    assert.match(err.message, /^feature 0: dwellMs must be .* \(and 2 more problems\)$/);
  }
});

test('a rejected reload leaves the serving store answering as before', () => {
  const store = FenceStore.open(
    buildFenceStore(parseFences(collection(square('a', 0, 0, 50), circle('c', 300, 0, 20))), 1),
  );
  const [lat, lon] = at(0, 0);
  const [clat, clon] = at(300, 10);
  assert.equal(store.contains(0, lat, lon), true);
  assert.throws(
    () => buildFenceStore(parseFences(collection(square('a', 0, 0, 50), square('a', 10, 0, 5))), 2),
    FenceValidationError,
  );
  assert.equal(store.generation, 1);
  assert.equal(store.contains(0, lat, lon), true);
  assert.equal(store.contains(1, clat, clon), true);
  const out = new Int32Array(4);
  assert.equal(store.candidatesInto(lat, lon, out), 1);
  assert.equal(store.fenceId(out[0]!), 'a');
});

test('properties are carried into the store', () => {
  const parsed = parseFences(
    collection(square('a', 0, 0, 50, { compliance: true, tags: ['x', 'y'], dwellMs: 10, exitBufferM: 3 }), {
      ...circle('c', 300, 0, 20),
      properties: { id: 7, radius: 20 },
    }),
  );
  const store = FenceStore.open(buildFenceStore(parsed, 3, { nodeSize: 4 }));
  assert.equal(store.fenceCount, 2);
  assert.equal(store.isCompliance(0), true);
  assert.equal(store.isCompliance(1), false);
  assert.deepEqual(store.tags(0), ['x', 'y']);
  assert.equal(store.fenceId(1), '7');
  assert.equal(store.indexOfId('7'), 1);
  assert.equal(store.indexOfId('nope'), -1);
  assert.throws(
    () => buildFenceStore(parsed, 1, { nodeSize: 1 }),
    /options.nodeSize must be an integer in \[2, 256\], got 1/,
  );
  const empty = FenceStore.open(buildFenceStore(parseFences(collection()), 4));
  assert.equal(empty.candidatesInto(52.5, 13.4, new Int32Array(1)), 0);
  assert.equal(empty.nearCompliance(52.5, 13.4, 100), false);
});
