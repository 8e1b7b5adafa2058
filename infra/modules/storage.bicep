// The Functions host's own storage (AzureWebJobsStorage: Durable Functions task hub queues, tables and
// blobs; timer and lease blobs) and the Flex Consumption deployment container. orderflow keeps nothing
// here itself. No shared key, no public blob, TLS 1.2: only Entra ID tokens get in.
param name string
param location string
param tags object

var deploymentContainerName = 'app-package'

resource storage 'Microsoft.Storage/storageAccounts@2026-04-01' = {
  // checkov:skip=CKV_AZURE_35:no virtual network in this template: the Functions host reaches its storage over the public endpoint, with Entra ID (shared keys off)
  // checkov:skip=CKV_AZURE_59:no private endpoint in this template, so the host needs the public endpoint; Entra ID only, no public blob
  // checkov:skip=CKV_AZURE_206:one region by design (Cosmos DB, Service Bus and the app too): a geo copy of the task hub alone recovers nothing, and the supervisor restarts orders from Cosmos DB
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_LRS'
  }
  properties: {
    allowSharedKeyAccess: false
    allowBlobPublicAccess: false
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    defaultToOAuthAuthentication: true
    allowCrossTenantReplication: false
    publicNetworkAccess: 'Enabled'
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2026-04-01' = {
  parent: storage
  name: 'default'
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

output name string = storage.name
output deploymentContainerUrl string = '${storage.properties.primaryEndpoints.blob}${deploymentContainerName}'
