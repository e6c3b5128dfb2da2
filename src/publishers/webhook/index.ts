/**
 * `tx-outbox/webhook`: the webhook publisher and the signing helpers its receivers use.
 *
 * - `options.ts`   the options, resolved once (`concurrency` is the old spelling of `maxInFlight`)
 * - `endpoints.ts` where each message is POSTed, credentials and secrets kept out of messages
 * - `request.ts`   routing, grouping and building the POSTs (binary or batch mode), their headers
 * - `signature.ts` Standard Webhooks signing and the signed event headers (`txo-signature`)
 * - `response.ts`  status, network error and abort → outcome; Retry-After
 * - `publisher.ts` the publisher: in-flight window, one CallAbort per request, close()
 */

export type { WebhookEndpoints } from './endpoints.js';
export type { WebhookPublisherOptions } from './options.js';
export { webhookPublisher } from './publisher.js';
export {
  type SignWebhookInput,
  type SignWebhookRequestInput,
  signWebhook,
  signWebhookRequest,
  type VerifyWebhookInput,
  verifyWebhook,
  verifyWebhookEvent,
  type WebhookSecret,
  type WebhookVerification,
} from './signature.js';
