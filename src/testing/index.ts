export {
  type ConsumerSetup,
  type ConsumerUnderTest,
  consumerContract,
  type EnvelopeSender,
} from './consumer-contract.js';
export { AWKWARD_IDS, PREVIOUS_IDS, previousEnvelopeHeaders } from './envelopes.js';
export {
  contractMessage,
  type PublisherFeatures,
  type PublisherUnderTest,
  publisherContract,
  type ReceivedMessage,
  type TestApi,
} from './publisher-contract.js';
export {
  type Address,
  type Direction,
  type HangUp,
  type StallOptions,
  TcpProxy,
  type TcpProxyOptions,
} from './tcp-proxy.js';
