// The Service Bus namespace and orderflow's internal queues (agent requests, agent responses). Each
// client's two queues come with its own module (client.bicep). Standard tier: duplicate detection needs
// it. No SAS keys are usable (disableLocalAuth): every sender and receiver is an Entra principal.
param name string
param location string
param tags object

@description('The internal queues: one request queue per agent and the response queue.')
param queueNames array

@description('Queue lock duration, ISO 8601 (main.bicep says why each queue value).')
param lockDuration string

@description('Deliveries before the broker dead-letters a message.')
param maxDeliveryCount int

@description('Duplicate detection window, ISO 8601.')
param duplicateDetectionWindow string

@description('Time-to-live of a message sent without one, ISO 8601; dead-lettered on expiry.')
param messageTimeToLive string

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: 'Standard'
    tier: 'Standard'
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
  }
}

resource queues 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = [for queueName in queueNames: {
  parent: namespace
  name: queueName
  // Set here, not passed in as an object: tests/infra type-checks these names against the queue type.
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
}]

output name string = namespace.name
output id string = namespace.id
output fullyQualifiedNamespace string = '${namespace.name}.servicebus.windows.net'
