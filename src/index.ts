export { pgErrorCode, pgTransactions } from './adapters/pg.js';
export { abortedTransaction, findErrorCode, type TransactionRunner } from './adapters/transactions.js';
export { type CdcRelay, type CdcRelayOptions, type CdcStats, createCdcRelay } from './cdc/relay.js';
export {
  type CdcNameOptions,
  type CdcSlotStatus,
  cdcSlotStatus,
  type DropCdcSlotOptions,
  dropCdcSlot,
  type EnsureCdcSlotResult,
  ensureCdcSlot,
} from './cdc/setup.js';
export { type EnvelopeAttributes, envelopeAttributes, paddedSequence } from './envelope/attributes.js';
export { type EnvelopeBinding, envelopeHeaders, structuredAttributes } from './envelope/bindings.js';
export { percentDecode, percentEncode } from './envelope/percent.js';
export {
  BROKER_UNAVAILABLE,
  brokerUnavailable,
  isBrokerUnavailable,
  isRetryableDatabaseError,
  OutboxBackpressureError,
  OutboxError,
  OutboxValidationError,
  PublishError,
} from './errors.js';
export {
  type AcceptedEvent,
  createInbox,
  type HandleResult,
  type HandleStatus,
  type Inbox,
  type InboxEvent,
  type InboxHandler,
  type InboxOptions,
  type InboxStats,
  type StandardSchema,
} from './inbox/inbox.js';
export { fromEnvelope, type InboxMessage } from './inbox/message.js';
export { ORDERING_POLICIES, type OrderingPolicy, type StartSequence } from './inbox/ordering.js';
export {
  listQuarantine,
  type PruneInboxOptions,
  pruneInbox,
  type QuarantinedMessage,
  releaseQuarantined,
  showQuarantined,
} from './inbox/quarantine.js';
export { type Logger, silentLogger } from './logger.js';
export { FAILURE_CODES } from './metrics/error-code.js';
export type { DeadReason, LeaseChange, RetriedReason } from './metrics/relay-metrics.js';
export {
  METER_NAME,
  type MeterLike,
  type MetricsOption,
  type RegistryLike,
  resolveMetrics,
} from './metrics/resolve.js';
export type {
  CounterMetric,
  GaugeMetric,
  HistogramMetric,
  MetricLabels,
  MetricsSink,
} from './metrics/sink.js';
export {
  type Backlog,
  type PartitionBacklog,
  type ReadBacklogOptions,
  type RelayInstanceStatus,
  readBacklog,
} from './ops/backlog.js';
export { type BacklogGaugesOptions, registerBacklogGauges } from './ops/backlog-gauges.js';
export {
  countDead,
  type DeadEvent,
  type DeadFilter,
  listDead,
  type ReplayOptions,
  replayDead,
} from './ops/dead-letter.js';
export { type AuditEntry, type EventDetails, type ShowResult, showEvent } from './ops/dead-show.js';
export { type SkipOptions, type SkipResult, skipDead } from './ops/dead-skip.js';
export {
  type Delivery,
  type EventIdentity,
  type EventLocation,
  type EventWait,
  type FindEventOptions,
  findEvent,
  type HistoryReach,
} from './ops/find-event.js';
export { type MetricsServer, type ServeMetricsOptions, serveMetrics } from './ops/http.js';
/** Bounded tables: prune idle aggregates, dead relays, old audit rows and inbox records (docs/schema.md). */
export {
  type InboxPruneOptions,
  PRUNED_TABLES,
  type PrunedTable,
  type PruneOptions,
  type PruneResult,
  prune,
} from './ops/prune.js';
export type {
  HealthSource,
  ReadinessCheck,
  ReadinessCheckName,
  ReadinessReport,
} from './ops/readiness.js';
export {
  type OutboxStatus,
  type OutboxStatusOptions,
  outboxStatus,
  type PartitionStatus,
} from './ops/status.js';
export type { BackpressureMode } from './producer/backpressure.js';
export { type EnqueueOptions, type EnqueueResult, enqueue } from './producer/enqueue.js';
export type { OutboxEvent } from './producer/event.js';
export type { SqlExecutor } from './producer/executor.js';
export { inTransaction } from './producer/transaction.js';
export {
  DELIVERED,
  failed,
  type OutboxMessage,
  type Publisher,
  type PublishOutcome,
} from './publishers/contract.js';
export { isPublisherClosed, PUBLISHER_CLOSED, publisherClosed } from './publishers/core/closed.js';
export { defaultDestination } from './publishers/core/destination.js';
export { permanent } from './publishers/core/outcomes.js';
export { PUBLISHER_KINDS, type PublisherKind } from './publishers/kind.js';
export { type Route, type RouteMatch, type RouterOptions, routerPublisher } from './publishers/router.js';
export {
  type HistoryMaintenance,
  type HistoryOptions,
  type MaintainHistoryOptions,
  maintainHistory,
} from './relay/history.js';
export type { RelayOptions } from './relay/options.js';
export { createRelay, type Relay, type RelayHealth, type RelayStats } from './relay/polling/relay.js';
export type { RelayPruneOptions } from './relay/pruner.js';
export {
  DEFAULT_PARTITIONS,
  DEFAULT_SCHEMA,
  type MigrateOptions,
  type MigrateResult,
  type MigrationSql,
  migrate,
  migrationSql,
} from './schema/migrate.js';
export {
  ROLE_KINDS,
  type RoleKind,
  type RoleNames,
  type RolesSql,
  type RolesSqlOptions,
  rolesSql,
} from './schema/roles.js';
export { SKIPPED_EVENT_TYPE, type SkipMarker, skipMarkerOf } from './skip-marker.js';
export type { InboxTracingOptions } from './tracing/process-span.js';
