/**
 * A TCP relay between a client and a server on loopback that can swallow what the client writes (the connection stays
 * up, the bytes never reach the server: a link that blackholes one way) and cut every connection through it.
 */
import * as net from 'node:net';

/** See the module comment. */
export class SwallowingRelay {
  /** While true, bytes from the client are dropped. */
  swallowing = false;
  /** Bytes dropped so far. */
  swallowedBytes = 0;
  port = 0;
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();

  constructor(targetPort: number) {
    this.server = net.createServer((client) => {
      const upstream = net.connect({ host: '127.0.0.1', port: targetPort });
      this.sockets.add(client).add(upstream);
      client.on('data', (b: Buffer) => {
        if (this.swallowing) this.swallowedBytes += b.length;
        else upstream.write(b);
      });
      upstream.on('data', (b: Buffer) => {
        if (client.writable) client.write(b);
      });
      const end = (): void => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(client);
        this.sockets.delete(upstream);
      };
      client.on('close', end).on('error', end);
      upstream.on('close', end).on('error', end);
    });
  }

  /** Listens on a free loopback port. */
  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  /** Cuts every connection through the relay (new ones are accepted). */
  cut(): void {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  /** Cuts every connection and stops listening. */
  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
