// The demo services (inventory, payments, shipping: demo/services) as a second Function App on its own
// Flex Consumption plan, serving their FastAPI app through azure.functions.AsgiFunctionApp
// (demo/services/azure). Why a Function App and not Container Apps: docs/deploy.md#the-demo-services.
//
// Protected by Entra ID: the services check every bearer token themselves (demo/services/auth.py) against
// the tenant's v2.0 issuer and keys and the audience of their app registration; the service routes take
// the app role Orderflow.Agent (the orderflow app's identity), the reporting and steering routes
// Orderflow.DemoDriver (the deployer running make demo-azure). Their state lives in memory, so the app
// runs on one instance at most: a second would hold a second ledger.
//
// They get an identity and a storage account of their own: nothing here can read orderflow's task hub,
// queues or stores, and orderflow's identity holds no role on anything here.
param planName string
param appName string
param identityName string
param storageAccountName string
param location string
param tags object

@description('azd service name of the demo services (azure.yaml): only this site carries the tag.')
param serviceName string

@description('Client id of the demo services app registration: the audience their tokens carry.')
param audienceClientId string

@description('Tenant whose Entra ID issues the tokens the services accept.')
param tenantId string

param pythonVersion string
param appInsightsName string
param appInsightsConnectionString string

@description('The first TPC-H orders by key the services load (0: all 15,000).')
param catalogOrders int = 0

var deploymentContainerName = 'demo-package'
var storageBlobDataOwner = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: identityName
  location: location
  tags: tags
}

resource storage 'Microsoft.Storage/storageAccounts@2026-04-01' = {
  // checkov:skip=CKV_AZURE_35:no virtual network in this template: the demo services' host reaches its storage over the public endpoint, with Entra ID (shared keys off)
  // checkov:skip=CKV_AZURE_59:no private endpoint in this template, so the host needs the public endpoint; Entra ID only, no public blob
  // checkov:skip=CKV_AZURE_206:the demo services' host keys and package only: a geo copy would keep nothing worth recovering
  // checkov:skip=CKV_AZURE_43:the name is 'stdemo' and the resource token (19 lowercase alphanumerics), from main.bicep, which checkov cannot evaluate
  name: storageAccountName
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

// The host's blobs (its keys and locks) and the deployment package: an HTTP-only app uses no queue or table.
resource storageBlobData 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, identity.id, storageBlobDataOwner)
  scope: storage
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataOwner)
    principalId: identity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource metricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, identity.id, monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: identity.properties.principalId
    principalType: 'ServicePrincipal'
  }
}

resource plan 'Microsoft.Web/serverfarms@2025-03-01' = {
  // checkov:skip=CKV_AZURE_225:zone redundancy bills always-ready instances in several zones; the demo services keep their state in memory on one instance anyway
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource app 'Microsoft.Web/sites@2025-03-01' = {
  // checkov:skip=CKV_AZURE_222:the agents call the demo services over the internet, as they would a third party; every route checks an Entra ID bearer token
  // checkov:skip=CKV_AZURE_17:callers authenticate with Entra ID bearer tokens the services check; no client certificates
  // checkov:skip=CKV_AZURE_212:the demo services scale from zero: an always-ready instance would bill while nobody runs the demo
  // checkov:skip=CKV_AZURE_213:no platform health probe: /healthz, like every route, takes a bearer token on Azure
  name: appName
  location: location
  tags: union(tags, {
    'azd-service-name': serviceName
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identity.id}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${storage.properties.primaryEndpoints.blob}${deploymentContainerName}'
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identity.id
          }
        }
      }
      scaleAndConcurrency: {
        // One ledger in memory: a second instance would answer from another one.
        maximumInstanceCount: 1
        instanceMemoryMB: 2048
      }
      runtime: {
        name: 'python'
        version: pythonVersion
      }
    }
    siteConfig: {
      minTlsVersion: '1.2'
      scmMinTlsVersion: '1.2'
      ftpsState: 'Disabled'
      http20Enabled: true
      appSettings: [
        { name: 'AzureWebJobsStorage__accountName', value: storage.name }
        { name: 'AzureWebJobsStorage__credential', value: 'managedidentity' }
        { name: 'AzureWebJobsStorage__clientId', value: identity.properties.clientId }
        // Whose tokens the services accept (demo.services.hosted): the tenant's v2.0 issuer and keys.
        { name: 'DEMO_SERVICES_TENANT_ID', value: tenantId }
        { name: 'DEMO_SERVICES_AUDIENCE', value: audienceClientId }
        { name: 'DEMO_SERVICES_CATALOG_ORDERS', value: string(catalogOrders) }
        { name: 'APPLICATIONINSIGHTS_CONNECTION_STRING', value: appInsightsConnectionString }
        { name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING', value: 'ClientId=${identity.properties.clientId};Authorization=AAD' }
      ]
    }
  }
}

resource ftpPolicy 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2025-03-01' = {
  parent: app
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmPolicy 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2025-03-01' = {
  parent: app
  name: 'scm'
  properties: {
    allow: false
  }
}

output name string = app.name
output url string = 'https://${app.properties.defaultHostName}'
@description('The scope the agents ask tokens for: the registration app ID URI, api://<client id>.')
output scope string = 'api://${audienceClientId}/.default'
output principalId string = identity.properties.principalId
