// One registered client (docs/clients.md): its inbound and reply queues, the roles on them, and the entry
// it takes in the CLIENTS registry. Adding a client is one more call of this module in main.bicep.
//
// The client's principal holds exactly two roles, each on one queue: Data Sender on its inbound queue,
// Data Receiver on its reply queue; none on the namespace or any other queue. The app identity owns the
// inbound queue (its submission trigger, redelivery copies, the queue's length) and sends to the reply
// queue; nobody else can send a reply.
param serviceBusName string

@description('The client id: a slug of lowercase letters, digits and single inner hyphens (it names the queues).')
@minLength(1)
@maxLength(32)
param clientId string

@description('Object id of the client service principal (the oid of its tokens); empty: no identity yet, no roles.')
param principalId string = ''

@description('Object id of a person or pipeline given the client roles too (the deployer running make demo-azure); empty: nobody.')
param deployerPrincipalId string = ''

@description('The client own ceiling on orders in flight; 0 for none.')
param maxInFlight int = 0

@description('Principal id of the app identity.')
param appPrincipalId string

@description('Queue lock duration, ISO 8601 (main.bicep says why each queue value).')
param lockDuration string

@description('Deliveries before the broker dead-letters a message.')
param maxDeliveryCount int

@description('Duplicate detection window, ISO 8601.')
param duplicateDetectionWindow string

@description('Time-to-live of a message sent without one, ISO 8601; dead-lettered on expiry.')
param messageTimeToLive string

var inboundQueueName = 'orders-${clientId}'
var replyQueueName = 'replies-${clientId}'
var serviceBusDataSender = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
var serviceBusDataReceiver = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
var serviceBusDataOwner = '090c5cfd-751d-490a-894a-3ce6f1109419'
var hasPrincipal = !empty(principalId)
var hasDeployer = !empty(deployerPrincipalId)
var hasQuota = maxInFlight > 0

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: serviceBusName
}

resource inbound 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = {
  parent: namespace
  name: inboundQueueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: messageTimeToLive
    requiresSession: false
    enablePartitioning: false
  }
}

resource reply 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = {
  parent: namespace
  name: replyQueueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: messageTimeToLive
    requiresSession: false
    enablePartitioning: false
  }
}

resource clientSendsInbound 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasPrincipal) {
  name: guid(inbound.id, principalId, serviceBusDataSender)
  scope: inbound
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

resource clientReceivesReply 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasPrincipal) {
  name: guid(reply.id, principalId, serviceBusDataReceiver)
  scope: reply
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

// The same two roles for the deployer, when asked: its orders arrive on this client's queue and count as the
// client's (a client is the entity its message arrived on). No principalType: a person or a pipeline.
resource deployerSendsInbound 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasDeployer) {
  name: guid(inbound.id, deployerPrincipalId, serviceBusDataSender)
  scope: inbound
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
    principalId: deployerPrincipalId
  }
}

resource deployerReceivesReply 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (hasDeployer) {
  name: guid(reply.id, deployerPrincipalId, serviceBusDataReceiver)
  scope: reply
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataReceiver)
    principalId: deployerPrincipalId
  }
}

// The app's submission trigger receives from the inbound queue, and the app sends redelivery copies to
// it. Data Owner, on this one queue, holds both and the Manage right that reads the queue's length: the
// scale controller's target-based scaling and admission control's backlog check (MAX_SUBMISSION_BACKLOG)
// both read it. The cost, managing (changing or deleting) this queue: docs/deploy.md#roles.
resource appOwnsInbound 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(inbound.id, appPrincipalId, serviceBusDataOwner)
  scope: inbound
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource appSendsReply 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(reply.id, appPrincipalId, serviceBusDataSender)
  scope: reply
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataSender)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

var identityEntry = hasPrincipal ? { principalId: principalId } : {}
var quotaEntry = hasQuota ? { maxInFlight: maxInFlight } : {}

@description('This client entry of the CLIENTS registry (orderflow.clients).')
output registryEntry object = union({ id: clientId, inboundQueue: inbound.name, replyQueue: reply.name }, identityEntry, quotaEntry)
output inboundQueue string = inbound.name
output replyQueue string = reply.name
