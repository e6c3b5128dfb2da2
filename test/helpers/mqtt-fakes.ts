import { type AddressInfo, createServer, type Socket } from 'node:net';

/** A TCP server on a free local port (`url` = mqtt://127.0.0.1:<port>); `close()` drops every socket it tracks. */
abstract class LocalServer {
  readonly #sockets = new Set<Socket>();
  readonly #server = createServer((socket) => this.accept(socket));

  protected abstract accept(socket: Socket): void;

  /** Tracks `socket` until it closes, so that `close()` can end it. */
  protected track(socket: Socket): void {
    this.#sockets.add(socket);
    socket.on('close', () => this.#sockets.delete(socket));
  }

  protected async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
  }

  get url(): string {
    return `mqtt://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

// --- a scripted MQTT 5 "broker" for answers Mosquitto will not give ---------------------------

export interface FakeBrokerOptions {
  /** The CONNACK to answer every CONNECT with. */
  readonly connack: Buffer;
  /** PUBACK reason code for a PUBLISH to `topic`; `disconnect` = DISCONNECT with that reason and hang up; undefined = no answer. */
  readonly reasonCode?: (topic: string) => number | { disconnect: number } | undefined;
}

/** CONNACK (MQTT 5) accepting the connection, with optional Receive Maximum and Maximum Packet Size. */
export function connack5(properties: { receiveMaximum?: number; maximumPacketSize?: number } = {}): Buffer {
  const props: number[] = [];
  if (properties.receiveMaximum !== undefined) {
    props.push(0x21, properties.receiveMaximum >> 8, properties.receiveMaximum & 0xff);
  }
  if (properties.maximumPacketSize !== undefined) {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(properties.maximumPacketSize);
    props.push(0x27, ...b);
  }
  return Buffer.from([0x20, 3 + props.length, 0x00, 0x00, props.length, ...props]);
}

export class FakeBroker extends LocalServer {
  readonly published: string[] = [];

  private constructor(readonly options: FakeBrokerOptions) {
    super();
  }

  static async start(options: FakeBrokerOptions): Promise<FakeBroker> {
    const broker = new FakeBroker(options);
    await broker.listen();
    return broker;
  }

  protected accept(socket: Socket): void {
    this.track(socket);
    socket.on('error', () => socket.destroy());
    let buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        // Fixed header: type, then the remaining length as a variable byte integer.
        let length = 0;
        let shift = 0;
        let at = 1;
        for (; at < buffer.length && at < 5; at += 1) {
          length += (buffer[at]! & 0x7f) << shift;
          shift += 7;
          if ((buffer[at]! & 0x80) === 0) break;
        }
        if (at >= buffer.length || buffer.length < at + 1 + length) return;
        const type = buffer[0]! >> 4;
        const body = buffer.subarray(at + 1, at + 1 + length);
        buffer = buffer.subarray(at + 1 + length);
        if (type === 1) socket.write(this.options.connack);
        else if (type === 3)
          this.#onPublish(socket, body); // QoS 1: a packet id follows the topic
        else if (type === 12) socket.write(Buffer.from([0xd0, 0x00]));
        else if (type === 14) socket.end();
      }
    });
  }

  #onPublish(socket: Socket, body: Buffer): void {
    const topicLength = body.readUInt16BE(0);
    const topic = body.subarray(2, 2 + topicLength).toString('utf8');
    const id = body.readUInt16BE(2 + topicLength);
    this.published.push(topic);
    const rc = this.options.reasonCode?.(topic);
    if (typeof rc === 'number') socket.write(Buffer.from([0x40, 0x04, id >> 8, id & 0xff, rc, 0x00]));
    else if (rc !== undefined) socket.end(Buffer.from([0xe0, 0x02, rc.disconnect, 0x00]));
  }
}
