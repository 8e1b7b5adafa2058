// orderflow on Azure: `azd up` provisions everything the Functions app uses, keyless.
// What each module creates and why: docs/deploy.md.
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('azd environment name; names the resource group and seeds every resource name.')
param environmentName string

// The regions offering the Flex Consumption plan, as Microsoft's Flex Consumption azd samples list them
// (`az functionapp list-flexconsumption-locations` gives the current list): azd offers only these, and a
// deploy cannot fail on the plan after Cosmos DB and Service Bus exist.
@minLength(1)
@description('Azure region of every resource: one offering the Flex Consumption plan.')
@allowed([
  'australiaeast'
  'australiasoutheast'
  'brazilsouth'
  'canadacentral'
  'centralindia'
  'centralus'
  'eastasia'
  'eastus'
  'eastus2'
  'eastus2euap'
  'francecentral'
  'germanywestcentral'
  'italynorth'
  'japaneast'
  'koreacentral'
  'northcentralus'
  'northeurope'
  'norwayeast'
  'southafricanorth'
  'southcentralus'
  'southeastasia'
  'southindia'
  'spaincentral'
  'swedencentral'
  'uaenorth'
  'uksouth'
  'ukwest'
  'westcentralus'
  'westeurope'
  'westus'
  'westus2'
  'westus3'
])
@metadata({
  azd: {
    type: 'location'
  }
})
param location string

@description('Object id of the deploying principal (azd sets AZURE_PRINCIPAL_ID). It gets no role unless grantDeployerReadAccess.')
param principalId string = ''

@description('Give the deployer read-only Cosmos DB data access to the database (to read orders directly; the CLI reads them through the operator API). Off by default: nobody but the app reads orders.')
param grantDeployerReadAccess bool = false

@description('SERVICE_BINDINGS: JSON object, per agent its remote service (baseUrl, auth, operations); docs/extending.md. Not read when deployDemoServices: the agents are bound to the demo services.')
param serviceBindings string = ''

@description('Deploy the demo services and bind every agent to them (a demo environment); false in production, where serviceBindings names the real services.')
param deployDemoServices bool = false

@description('Client id of the demo services app registration (their token audience; app ID URI api://<client id>); docs/deploy.md.')
param demoServicesClientId string = ''

@description('Give the deployer (principalId) the demo client roles on its two queues, Data Sender on orders-demo and Data Receiver on replies-demo, for make demo-azure.')
param grantDeployerDemoClientAccess bool = false

@description('Client id (or api://... URI) of the operator API app registration; empty leaves the operator API unconfigured (it refuses every call).')
param operatorApiAudience string = ''

@description('Client id of the app registration the web console signs operators in with (its SPA redirect URI is the console); empty offers only a pasted token.')
param operatorConsoleClientId string = ''

@description('Object id of the demo client service principal; empty registers the client without an identity (no role assignments).')
param demoClientPrincipalId string = ''

@description('Python version of the Flex Consumption worker: 3.13 is the version the worker tests run (azure-functions-runtime pinned).')
@allowed(['3.11', '3.12', '3.13'])
param pythonVersion string = '3.13'

@description('Most instances the app scales out to: bounds the Cosmos DB RU and Service Bus concurrency one burst can drive.')
param maximumInstanceCount int = 40

@description('Ceiling on messages waiting in a client inbound queue (MAX_SUBMISSION_BACKLOG); 0 turns the backlog check off.')
param maxSubmissionBacklog int = 5000

@description('E-mail address the alerts notify; empty creates the alert rules without an action group.')
param alertEmail string = ''

@description('Flex Consumption groups given one always-ready instance each, comma-separated: durable (orchestrations and activities), function:submission_<client>, function:response_listener, function:agent_<agent>, function:starter, function:supervisor. Empty (the default): every group scales from zero; each instance adds to the idle month what docs/deploy.md says.')
param alwaysReady string = ''

// Group names hold no spaces: 'durable, function:starter' names the same two groups as without them.
var alwaysReadyNames = replace(alwaysReady, ' ', '')
var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
}
var tenantId = subscription().tenantId

// Queue names: the app reads the same values from AGENT_QUEUE_PREFIX and AGENT_RESPONSES_QUEUE.
var agentQueuePrefix = 'agent-'
var agentResponsesQueue = 'agent-responses'
// orderflow.workflows.agent_names(): one request queue (and trigger) per agent any workflow version uses.
var agentNames = [
  'courier'
  'inventory'
  'payment'
  'shipping'
]
var agentQueues = [for agent in agentNames: '${agentQueuePrefix}${agent}']
var internalQueues = concat(agentQueues, [agentResponsesQueue])

// Every queue's properties, chosen against the retry budget (docs/deploy.md#queues):
// - lockDuration 30 s (QUEUE_LOCK_S): longer than the longest handler, an agent working up to its step
//   deadline (STEP_TIMEOUT_S 8 s plus START_LATENCY_S 5 s); the host renews it for up to 2 min beyond.
// - maxDeliveryCount 10 (MAX_DELIVERY_COUNT): orderflow dead-letters on the 10th delivery itself; the
//   broker's count only bounds abandons. A redelivered agent request makes no remote call, so broker
//   redeliveries never spend the order's RETRY_BUDGET (24 calls); the 9 backed-off redeliveries before
//   the 10th (1 s .. 30 s) take about 2.5 minutes, well inside the 14-day time-to-live.
// - duplicate detection over 10 minutes: message ids are stable per logical request; the window covers
//   SDK and host retries, an activity re-run and the reply relay's re-send (REPLY_GRACE_S 30 s plus a
//   30 s sweep) several times over; consumers dedupe anything older by order and request id.
// - time-to-live 14 days, dead-lettered on expiry: orderflow sends without a TTL, and an expired
//   message must land in the dead-letter queue for an operator, never vanish.
var queueLockSeconds = 30
var maxDeliveryCount = 10
// Passed to the Service Bus and client modules as scalars: each module writes the queue properties
// itself, so their names are type-checked against the queue type (an object parameter would hide them).
var queueSettings = {
  lockDuration: 'PT${queueLockSeconds}S'
  maxDeliveryCount: maxDeliveryCount
  duplicateDetectionWindow: 'PT10M'
  messageTimeToLive: 'P14D'
}

var cosmosDatabaseName = 'orderflow'
var taskHubName = 'orderflow'
var serviceName = 'api'
var demoServicesServiceName = 'demo-services'

// The demo services' operations, as demo.services.bindings.DEMO_OPERATIONS maps each agent's onto them
// (tests/infra/test_app_against_infra.py holds the two equal). The undos address the forward call by its key.
var demoShipping = {
  ship: { method: 'POST', path: '/shipping/shipments', result: ['shipmentId', 'carrier'] }
  cancel: { method: 'POST', path: '/shipping/shipments/cancel', result: ['undone', 'reason', 'shipmentId'] }
}
var demoOperations = {
  inventory: {
    reserve: { method: 'POST', path: '/inventory/reservations', result: ['reservationId', 'holdId', 'expiresAt'] }
    commit: { method: 'POST', path: '/inventory/reservations/commit', result: ['reservationId', 'committed'] }
    release: { method: 'POST', path: '/inventory/reservations/release', result: ['undone', 'reason', 'reservationId'] }
  }
  payment: {
    charge: { method: 'POST', path: '/payments/charges', result: ['chargeId', 'amount', 'currency'] }
    refund: { method: 'POST', path: '/payments/refunds', result: ['undone', 'reason', 'chargeId', 'refundId', 'amount'] }
    authorize: { method: 'POST', path: '/payments/authorizations', result: ['authorizationId', 'holdId', 'expiresAt', 'amount', 'currency'] }
    capture: { method: 'POST', path: '/payments/authorizations/capture', result: ['authorizationId', 'chargeId', 'amount'] }
    void: { method: 'POST', path: '/payments/authorizations/void', result: ['undone', 'reason', 'authorizationId', 'refundId', 'expired'] }
  }
  shipping: demoShipping
  // The second carrier: a courier posting to the same demo shipping service.
  courier: demoShipping
}

resource rg 'Microsoft.Resources/resourceGroups@2025-04-01' = {
  name: 'rg-${environmentName}'
  location: location
  tags: tags
}

module identity 'modules/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: 'id-${resourceToken}'
    location: location
    tags: tags
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: 'log-${resourceToken}'
    appInsightsName: 'appi-${resourceToken}'
    location: location
    tags: tags
  }
}

module storage 'modules/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: 'st${resourceToken}'
    location: location
    tags: tags
  }
}

module serviceBus 'modules/servicebus.bicep' = {
  name: 'servicebus'
  scope: rg
  params: {
    name: 'sb-${resourceToken}'
    location: location
    tags: tags
    queueNames: internalQueues
    lockDuration: queueSettings.lockDuration
    maxDeliveryCount: queueSettings.maxDeliveryCount
    duplicateDetectionWindow: queueSettings.duplicateDetectionWindow
    messageTimeToLive: queueSettings.messageTimeToLive
  }
}

module cosmos 'modules/cosmos.bicep' = {
  name: 'cosmos'
  scope: rg
  params: {
    name: 'cosmos-${resourceToken}'
    location: location
    tags: tags
    databaseName: cosmosDatabaseName
    appPrincipalId: identity.outputs.principalId
    deployerPrincipalId: grantDeployerReadAccess ? principalId : ''
  }
}

module roles 'modules/roles.bicep' = {
  name: 'roles'
  scope: rg
  params: {
    appPrincipalId: identity.outputs.principalId
    serviceBusName: serviceBus.outputs.name
    internalQueues: internalQueues
    storageAccountName: storage.outputs.name
    appInsightsName: monitoring.outputs.appInsightsName
  }
}

// One module call per client: its two queues, its roles and its registry entry.
module demoClient 'modules/client.bicep' = {
  name: 'client-demo'
  scope: rg
  params: {
    serviceBusName: serviceBus.outputs.name
    clientId: 'demo'
    principalId: demoClientPrincipalId
    deployerPrincipalId: grantDeployerDemoClientAccess ? principalId : ''
    maxInFlight: 500
    appPrincipalId: identity.outputs.principalId
    lockDuration: queueSettings.lockDuration
    maxDeliveryCount: queueSettings.maxDeliveryCount
    duplicateDetectionWindow: queueSettings.duplicateDetectionWindow
    messageTimeToLive: queueSettings.messageTimeToLive
  }
}

var clients = string([
  demoClient.outputs.registryEntry
])

module demoServices 'modules/demoservices.bicep' = if (deployDemoServices) {
  name: 'demoservices'
  scope: rg
  params: {
    planName: 'plan-demo-${resourceToken}'
    appName: 'func-demo-${resourceToken}'
    identityName: 'id-demo-${resourceToken}'
    storageAccountName: 'stdemo${resourceToken}'
    location: location
    tags: tags
    serviceName: demoServicesServiceName
    audienceClientId: demoServicesClientId
    tenantId: tenantId
    pythonVersion: pythonVersion
    appInsightsName: monitoring.outputs.appInsightsName
    appInsightsConnectionString: monitoring.outputs.appInsightsConnectionString
  }
}

// Every agent bound to the demo services, with tokens of the app identity for their audience
// (orderflow.bindings; the same bindings demo.services.bindings.demo_bindings gives a local run).
var demoServiceBinding = {
  baseUrl: demoServices.outputs.url
  auth: {
    mode: 'entra'
    scope: demoServices.outputs.scope
  }
  timeoutS: 30
  connectTimeoutS: 3
}
var agentBindings = deployDemoServices ? string({
  inventory: union(demoServiceBinding, { operations: demoOperations.inventory })
  payment: union(demoServiceBinding, { operations: demoOperations.payment })
  shipping: union(demoServiceBinding, { operations: demoOperations.shipping })
  courier: union(demoServiceBinding, { operations: demoOperations.courier })
}) : serviceBindings

module functionApp 'modules/functionapp.bicep' = {
  name: 'functionapp'
  scope: rg
  params: {
    planName: 'plan-${resourceToken}'
    appName: 'func-${resourceToken}'
    location: location
    tags: tags
    serviceName: serviceName
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    pythonVersion: pythonVersion
    maximumInstanceCount: maximumInstanceCount
    storageAccountName: storage.outputs.name
    deploymentContainerUrl: storage.outputs.deploymentContainerUrl
    appInsightsConnectionString: monitoring.outputs.appInsightsConnectionString
    serviceBusNamespace: serviceBus.outputs.fullyQualifiedNamespace
    cosmosEndpoint: cosmos.outputs.endpoint
    cosmosDatabaseName: cosmosDatabaseName
    taskHubName: taskHubName
    clients: clients
    agentQueuePrefix: agentQueuePrefix
    agentResponsesQueue: agentResponsesQueue
    queueLockSeconds: queueLockSeconds
    maxDeliveryCount: maxDeliveryCount
    maxSubmissionBacklog: maxSubmissionBacklog
    serviceBindings: agentBindings
    operatorTenantId: empty(operatorApiAudience) ? '' : tenantId
    operatorAudience: operatorApiAudience
    consoleClientId: empty(operatorApiAudience) ? '' : operatorConsoleClientId
    alwaysReadyGroups: empty(alwaysReadyNames) ? [] : split(alwaysReadyNames, ',')
  }
}

module alerts 'modules/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  params: {
    location: location
    tags: tags
    nameSuffix: resourceToken
    serviceBusName: serviceBus.outputs.name
    appInsightsName: monitoring.outputs.appInsightsName
    internalQueueNames: internalQueues
    alertEmail: alertEmail
  }
}

// azd writes these to the environment's .env; the names are the settings orderflow reads.
output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
output ORDERFLOW_API_URL string = functionApp.outputs.url
output SERVICEBUS__fullyQualifiedNamespace string = serviceBus.outputs.fullyQualifiedNamespace
output COSMOS_ENDPOINT string = cosmos.outputs.endpoint
output COSMOS_DATABASE string = cosmosDatabaseName
output TASK_HUB_NAME string = taskHubName
output CLIENTS string = clients
// What make demo-azure reads (demo.azure): where the demo services answer and the scope of their tokens.
output DEMO_SERVICES_ENDPOINT string = deployDemoServices ? demoServices.outputs.url : ''
output DEMO_SERVICES_SCOPE string = deployDemoServices ? demoServices.outputs.scope : ''
output DEMO_SERVICES_APP_NAME string = deployDemoServices ? demoServices.outputs.name : ''
output AZURE_APP_IDENTITY_PRINCIPAL_ID string = identity.outputs.principalId
