/** The bounding box of nested GeoJSON coordinates, degrees: [minLon, minLat, maxLon, maxLat]. */
export function coordinateBox(coords: unknown): [number, number, number, number] {
  const b: [number, number, number, number] = [Infinity, Infinity, -Infinity, -Infinity];
  const walk = (c: unknown): void => {
    if (Array.isArray(c) && typeof c[0] === 'number') {
      b[0] = Math.min(b[0], c[0] as number);
      b[1] = Math.min(b[1], c[1] as number);
      b[2] = Math.max(b[2], c[0] as number);
      b[3] = Math.max(b[3], c[1] as number);
    } else if (Array.isArray(c)) for (const x of c) walk(x);
  };
  walk(coords);
  return b;
}
