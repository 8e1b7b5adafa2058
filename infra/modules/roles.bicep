// The app identity's roles outside the clients' queues, each on the narrowest scope that works:
// - every internal queue (agent requests, agent responses): Azure Service Bus Data Owner, on that queue
//   alone. Its triggers receive there and it sends there (agents' requests and responses, redelivery
//   copies); Owner holds both, and also the Manage right the scale controller needs to read the queue's
//   length: with receive rights only, target-based scaling falls back to incremental scaling
//   (docs/deploy.md#roles). Only the app identity holds any role on these queues;
// - the host's storage account: blob, queue and table data, which the host and Durable Functions need;
// - Application Insights: Monitoring Metrics Publisher, for Entra-authenticated telemetry.
param appPrincipalId string
param serviceBusName string
param internalQueues array
param storageAccountName string
param appInsightsName string

var serviceBusDataOwner = '090c5cfd-751d-490a-894a-3ce6f1109419'
var storageBlobDataOwner = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
var storageQueueDataContributor = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var storageTableDataContributor = '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: serviceBusName
}

resource queues 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' existing = [for queueName in internalQueues: {
  parent: namespace
  name: queueName
}]

resource queueOwners 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in internalQueues: {
  name: guid(queues[i].id, appPrincipalId, serviceBusDataOwner)
  scope: queues[i]
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}]

resource storage 'Microsoft.Storage/storageAccounts@2026-04-01' existing = {
  name: storageAccountName
}

// One declaration per role, not a loop over a list of ids: the policy check (CKV_ORDERFLOW_5) reads
// each assignment's role id, and a loop variable has none it can read.
resource storageBlobData 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, storageBlobDataOwner)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource storageQueueData 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, storageQueueDataContributor)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageQueueDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource storageTableData 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, storageTableDataContributor)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageTableDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource metricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, appPrincipalId, monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}
