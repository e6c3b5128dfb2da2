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
export { printChildReport, readChildReports, relayChildPublisher } from './relay-child.js';
export {
  type ChildMode,
  type ChildRelayConfig,
  type ChildReport,
  type CommitMark,
  type ContractRelay,
  RELAY_CASES,
  type RelayBroker,
  type RelayCase,
  type RelayChild,
  type RelayFeatures,
  type RelayTestApi,
  type RelayUnderTest,
  relayContract,
  type SeenMessage,
} from './relay-contract.js';
export {
  type Address,
  type Direction,
  type HangUp,
  type StallOptions,
  TcpProxy,
  type TcpProxyOptions,
} from './tcp-proxy.js';
