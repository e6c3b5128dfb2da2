import { publisherClosed } from '../core/closed.js';
import { closeWithin } from '../core/lifecycle.js';
import { attachLink, closeLink, connectOwned, type Link } from './link.js';
import type { ResolvedRabbitMqOptions } from './options.js';
import { Session } from './session.js';

/**
 * The publisher's link and its confirm channel: opened at the first publish, opened again at
 * the next publish after either dropped (one connect at a time), closed by {@link terminate}.
 */
export class Connector {
  readonly #o: Pick<ResolvedRabbitMqOptions, 'client' | 'url' | 'clientOptions' | 'timeoutMs'>;
  #link: Link | undefined;
  #session: Session | undefined;
  #connecting: Promise<Session> | undefined;
  /** Set when the publisher starts tearing down: a connection arriving later is closed at once. */
  #terminated = false;

  constructor(options: Pick<ResolvedRabbitMqOptions, 'client' | 'url' | 'clientOptions' | 'timeoutMs'>) {
    this.#o = options;
  }

  /** The open session, or a new one on the open (or a new) link. */
  session(): Promise<Session> {
    const session = this.#session;
    if (session !== undefined && !session.closed) return Promise.resolve(session);
    this.#connecting ??= this.#openSession().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  /** Closes the channel and the link it opened; a connect still under way closes what it opens. */
  async terminate(): Promise<void> {
    this.#terminated = true;
    // A connect still under way closes what it opens on arrival (it sees #terminated).
    if (this.#connecting !== undefined) await closeWithin(this.#connecting, this.#o.timeoutMs);
    const link = this.#link;
    if (link !== undefined) await this.#teardown(this.#session, link);
  }

  async #openSession(): Promise<Session> {
    let link = this.#link;
    if (link === undefined || link.closed) {
      link = await this.#openLink();
      this.#link = link;
    }
    const channel = await link.model.createConfirmChannel();
    const session = new Session(link, channel);
    if (this.#terminated) {
      await this.#teardown(session, link);
      throw publisherClosed('RabbitMQ');
    }
    this.#session = session;
    return session;
  }

  async #openLink(): Promise<Link> {
    const { client, url, clientOptions, timeoutMs } = this.#o;
    const model = client ?? (await connectOwned(url!, clientOptions, timeoutMs));
    const link = attachLink(model, client === undefined);
    if (this.#terminated && link.owned) {
      await closeWithin(model.close(), timeoutMs);
      throw publisherClosed('RabbitMQ');
    }
    return link;
  }

  async #teardown(session: Session | undefined, link: Link): Promise<void> {
    const { timeoutMs } = this.#o;
    if (session !== undefined && !session.closed) await closeWithin(session.channel.close(), timeoutMs);
    await closeLink(link, timeoutMs);
  }
}
