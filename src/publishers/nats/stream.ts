/** The JetStream stream a NATS publisher lands in: made at first use when it is missing. */
import { jetstreamManager, StorageType, type StreamInfo } from '@nats-io/jetstream';
import { connect, type NatsConnection, nanos } from '@nats-io/transport-node';
import { renamedOptions } from '../../options/renamed.js';
import { apiErrorCode } from './classify.js';
import { DEFAULT_DEDUP_WINDOW_MS, DEFAULT_TIMEOUT_MS } from './options.js';

/** Options of {@link ensureStream}. */
export interface EnsureStreamOptions {
  readonly name: string;
  readonly subjects: readonly string[];
  /** Duplicate window (dedup by `Nats-Msg-Id`) in ms. Default 2 minutes. */
  readonly dedupWindowMs?: number;
  /** @deprecated Use `dedupWindowMs`. */
  readonly duplicateWindowMs?: number;
  /** Deadline of each JetStream API request, in ms. Default 10 000. */
  readonly timeoutMs?: number;
}

const STREAM_NOT_FOUND = 10059;
const STREAM_NAME_IN_USE = 10058;

/**
 * Creates the stream if it does not exist (file storage, the given duplicate window) and
 * returns its info. An existing stream is left as it is. With server URL(s) instead of a
 * connection, a temporary connection is opened and closed.
 */
export async function ensureStream(
  target: NatsConnection | string | string[],
  given: EnsureStreamOptions,
): Promise<StreamInfo> {
  const options = renamedOptions('ensureStream', given, { duplicateWindowMs: 'dedupWindowMs' });
  if (typeof target === 'string' || Array.isArray(target)) {
    const nc = await connect({ servers: target, timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS });
    try {
      return await ensureStream(nc, options);
    } finally {
      await nc.close();
    }
  }
  const jsm = await jetstreamManager(target, { timeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS });
  try {
    return await jsm.streams.info(options.name);
  } catch (error) {
    if (apiErrorCode(error) !== STREAM_NOT_FOUND) throw error;
  }
  const config = {
    name: options.name,
    subjects: [...options.subjects],
    storage: StorageType.File,
    duplicate_window: nanos(options.dedupWindowMs ?? DEFAULT_DEDUP_WINDOW_MS),
  };
  try {
    return await jsm.streams.add(config);
  } catch (error) {
    // Another process created it between our look-up and our add.
    if (apiErrorCode(error) === STREAM_NAME_IN_USE) return await jsm.streams.info(options.name);
    throw error;
  }
}
