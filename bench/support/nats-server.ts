/** A nats-server with JetStream started for a benchmark on a free loopback port, its store in a scratch directory. */
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Starts `nats-server -js` and resolves once it accepts connections; `stop` ends it. */
export async function startNats(): Promise<{ url: string; stop: () => void }> {
  const port = await freePort();
  const store = mkdtempSync(join(tmpdir(), 'bench-nats-'));
  const child = spawn('nats-server', ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', store], { stdio: 'ignore' });
  for (let i = 0; i < 200; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = net.connect({ host: '127.0.0.1', port }, () => {
        c.destroy();
        resolve(true);
      });
      c.once('error', () => resolve(false));
    });
    if (ok) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: `nats://127.0.0.1:${port}`, stop: () => child.kill('SIGTERM') };
}
