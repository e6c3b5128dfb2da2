import { describe, expect, it } from 'vitest';
import { redactFields, redactText, redactUrl } from '../../src/redact.js';

describe('redactUrl', () => {
  it('masks the password and every query value, keeping scheme, user, host, port, path and keys', () => {
    expect(redactUrl('https://user:s3cret@127.0.0.1:8080/hook?token=t0ken&x=1#frag')).toBe(
      'https://user:***@127.0.0.1:8080/hook?token=***&x=***',
    );
    expect(redactUrl(new URL('http://h/p?s3cret'))).toBe('http://h/p?***');
  });

  it('masks broker URLs of every scheme we connect to', () => {
    expect(redactUrl('amqp://guest:guest@127.0.0.1:5672/vhost')).toBe(
      'amqp://guest:***@127.0.0.1:5672/vhost',
    );
    expect(redactUrl('redis://:pa55@127.0.0.1:6379/0')).toBe('redis://:***@127.0.0.1:6379/0');
    expect(redactUrl('mqtt://u:p4ss@broker:1883')).toBe('mqtt://u:***@broker:1883');
    expect(redactUrl('nats://t0ken@127.0.0.1:4222')).toBe('nats://***@127.0.0.1:4222');
    expect(redactUrl('user:pa55@host:4222')).toBe('user:***@host:4222');
  });

  it('leaves an address without secrets as it is', () => {
    expect(redactUrl('http://127.0.0.1:9000/events')).toBe('http://127.0.0.1:9000/events');
    expect(redactUrl('127.0.0.1:9092')).toBe('127.0.0.1:9092');
  });

  it('masks what it can of text that is not a URL', () => {
    const out = redactUrl('http://us er:s3cret@[bad/hook?token=t0ken');
    expect(out).not.toMatch(/s3cret|t0ken/);
  });
});

describe('redactText', () => {
  it('masks every URL inside a message, keeping the sentence around it', () => {
    const text =
      'Request cannot be constructed from a URL that includes credentials: ' +
      'http://user:s3cret@127.0.0.1:1/hook?token=t0ken. Also nats://a:b1@x:1,nats://c:d2@y:2 (retry)';
    expect(redactText(text)).toBe(
      'Request cannot be constructed from a URL that includes credentials: ' +
        'http://user:***@127.0.0.1:1/hook?token=***. Also nats://a:***@x:1,nats://c:***@y:2 (retry)',
    );
  });
});

describe('redactFields', () => {
  it('masks URLs in every string of a log record, nested too, leaving Errors to the serializer', () => {
    const err = new Error('http://u:p4ss@h/');
    const record = { url: 'redis://:pa55@h:6379', n: 1, nested: { list: ['mqtt://a:b123@h'] }, err };
    expect(redactFields(record)).toEqual({
      url: 'redis://:***@h:6379',
      n: 1,
      nested: { list: ['mqtt://a:***@h'] },
      err,
    });
  });
});

describe('redaction an attacker (or an unlucky password) would probe', () => {
  it('masks passwords holding characters RFC 3986 allows unencoded in userinfo', () => {
    for (const password of ['pa(ss)word', "pa'ssword", 'pa,ssword', 'pa$s&wo=rd+', 'p!a*s;s']) {
      const text = `connect amqp://user:${password}@127.0.0.1:5672/vhost failed`;
      expect(redactText(text), password).toBe('connect amqp://user:***@127.0.0.1:5672/vhost failed');
    }
  });

  it('masks the query values of an address whose host is an IPv6 literal', () => {
    expect(redactText('POST http://[::1]:8080/hook?token=t0ken failed')).toBe(
      'POST http://[::1]:8080/hook?token=*** failed',
    );
    expect(redactText('nats://user:pw1@[fe80::1%25eth0]:4222?token=t0k')).toBe(
      'nats://user:***@[fe80::1%25eth0]:4222?token=***',
    );
  });

  it('masks a whole query value that holds a comma, and keeps lists of addresses apart', () => {
    expect(redactText('GET https://h/p?token=abc,def&x=1, then gave up')).toBe(
      'GET https://h/p?token=***&x=***, then gave up',
    );
    expect(redactText('nats://a:b1@x:1,nats://c:d2@y:2')).toBe('nats://a:***@x:1,nats://c:***@y:2');
  });

  it('masks every part of an unparsable address with more than one @', () => {
    expect(redactText('redis://:p@ss@host:99999')).not.toMatch(/ss@host/);
    expect(redactUrl('redis://:p@ss@host:99999')).toBe('redis://:***@host:99999');
  });

  it('leaves no string unmasked in a log record nested deeper than it walks', () => {
    const record = { a: { b: { c: { d: { e: { f: 'https://u:deepsecret@h/' } } } } } };
    expect(JSON.stringify(redactFields(record))).not.toContain('deepsecret');
  });
});
