// The Functions app on the Flex Consumption plan (FC1), running as the user-assigned identity. Every
// connection is identity-based and every app setting name is one orderflow or the Functions host reads
// (orderflow.settings, host.json, the bindings' %NAME% references); no setting holds a key.
param planName string
param appName string
param location string
param tags object

@description('azd service name of the app (azure.yaml): only the site carries the azd-service-name tag, since azd before 1.23.4 refuses a service whose tag is on more than one resource.')
param serviceName string
param identityId string
param identityClientId string
param pythonVersion string
param maximumInstanceCount int
param storageAccountName string
param deploymentContainerUrl string
param appInsightsConnectionString string
param serviceBusNamespace string
param cosmosEndpoint string
param cosmosDatabaseName string
param taskHubName string
param clients string
param agentQueuePrefix string
param agentResponsesQueue string
param queueLockSeconds int
param maxDeliveryCount int
param maxSubmissionBacklog int
param serviceBindings string
param operatorTenantId string
param operatorAudience string
param consoleClientId string

@description('Flex Consumption groups that keep one always-ready instance each: durable, or function:<name> of a trigger scaled on its own (function:agent_payment, function:response_listener, function:submission_<client>). Empty: every group scales from zero.')
param alwaysReadyGroups array = []

resource plan 'Microsoft.Web/serverfarms@2025-03-01' = {
  // checkov:skip=CKV_AZURE_225:zone-redundant Flex Consumption bills at least two always-ready instances per function group and exists in some regions only: a per-environment choice
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
  // checkov:skip=CKV_AZURE_222:operators reach the operator API over the internet, with Entra ID bearer tokens the app checks; no private endpoint here
  // checkov:skip=CKV_AZURE_17:callers authenticate with Entra ID bearer tokens; required client certificates would shut out operators holding none
  // checkov:skip=CKV_AZURE_212:Flex Consumption scales out on demand; always-ready instances are a cost choice per environment
  // checkov:skip=CKV_AZURE_213:the app serves no health route for the platform to probe (its only HTTP route is the authenticated operator API)
  name: appName
  location: location
  tags: union(tags, {
    'azd-service-name': serviceName
  })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: deploymentContainerUrl
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: 512
        // Billed all month per instance, busy or not: docs/deploy.md prices each choice.
        alwaysReady: [for group in alwaysReadyGroups: {
          name: group
          instanceCount: 1
        }]
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
        // The host's storage: the Durable Functions task hub (blobs, queues, tables), by identity.
        { name: 'AzureWebJobsStorage__accountName', value: storageAccountName }
        { name: 'AzureWebJobsStorage__credential', value: 'managedidentity' }
        { name: 'AzureWebJobsStorage__clientId', value: identityClientId }
        // host.json: "hubName": "%TASK_HUB_NAME%".
        { name: 'TASK_HUB_NAME', value: taskHubName }
        // The triggers' SERVICEBUS connection, and orderflow's own client (orderflow.wiring).
        { name: 'SERVICEBUS__fullyQualifiedNamespace', value: serviceBusNamespace }
        { name: 'SERVICEBUS__credential', value: 'managedidentity' }
        { name: 'SERVICEBUS__clientId', value: identityClientId }
        { name: 'AZURE_CLIENT_ID', value: identityClientId }
        { name: 'COSMOS_ENDPOINT', value: cosmosEndpoint }
        { name: 'COSMOS_DATABASE', value: cosmosDatabaseName }
        // Names the bindings resolve (%AGENT_QUEUE_PREFIX%<agent>, %AGENT_RESPONSES_QUEUE%, schedules).
        { name: 'AGENT_QUEUE_PREFIX', value: agentQueuePrefix }
        { name: 'AGENT_RESPONSES_QUEUE', value: agentResponsesQueue }
        // Names this app in its alerts, sweeps and timeline entries. Every instance shares the response
        // queue above whatever the host id (function_host.wiring.load_settings): no queue is named after it.
        { name: 'HOST_ID', value: appName }
        // The submission claims and starts each new order (CLAIM_ON_SUBMIT); the starter only sweeps.
        { name: 'CLAIM_ON_SUBMIT', value: 'true' }
        { name: 'STARTER_SCHEDULE', value: '*/30 * * * * *' }
        { name: 'SUPERVISOR_SCHEDULE', value: '*/30 * * * * *' }
        { name: 'CLIENTS', value: clients }
        // The same values as the queues' lockDuration and maxDeliveryCount.
        { name: 'QUEUE_LOCK_S', value: string(queueLockSeconds) }
        { name: 'MAX_DELIVERY_COUNT', value: string(maxDeliveryCount) }
        { name: 'MAX_SUBMISSION_BACKLOG', value: string(maxSubmissionBacklog) }
        { name: 'SERVICE_BINDINGS', value: serviceBindings }
        // Deadlines, the retry budget and the supervisor, stated here so a deployment says what it runs
        // with (each the default of orderflow.settings; docs/configuration.md says why).
        { name: 'STEP_TIMEOUT_S', value: '8' }
        { name: 'START_LATENCY_S', value: '5' }
        // false before rolling back to a version older than the starter's first request (docs/configuration.md).
        { name: 'STARTER_SENDS_FIRST_REQUEST', value: 'true' }
        { name: 'CLAIM_TIMEOUT_S', value: '30' }
        { name: 'STARTER_BATCH', value: '32' }
        { name: 'RETRY_BUDGET', value: '24' }
        { name: 'HOLD_SKEW_MARGIN_S', value: '2' }
        { name: 'AGENT_MAX_CALLS_PER_STEP', value: '4' }
        { name: 'AGENT_CALL_TIMEOUT_S', value: '5' }
        { name: 'AGENT_BACKOFF_INITIAL_S', value: '0.2' }
        { name: 'AGENT_BACKOFF_MAX_S', value: '2' }
        { name: 'SUPERVISOR_MAX_FAILURES', value: '6' }
        { name: 'SUPERVISOR_PAGE_SIZE', value: '100' }
        { name: 'SUPERVISOR_MAX_RECORDS', value: '500' }
        { name: 'SUPERVISOR_BACKOFF_INITIAL_S', value: '1' }
        { name: 'SUPERVISOR_BACKOFF_MAX_S', value: '30' }
        { name: 'SUPERVISOR_EXTENDED_BACKOFF_AFTER', value: '4' }
        { name: 'SUPERVISOR_EXTENDED_BACKOFF_S', value: '60' }
        { name: 'CLOCK_SKEW_TOLERANCE_S', value: '2' }
        { name: 'POISON_FAILURES', value: '3' }
        { name: 'POISON_VERSION_ORDERS', value: '5' }
        { name: 'POISON_VERSION_WINDOW_S', value: '600' }
        { name: 'REPLY_GRACE_S', value: '30' }
        { name: 'MAX_IN_FLIGHT_ORDERS', value: '10000' }
        { name: 'ADMISSION_REFRESH_S', value: '5' }
        { name: 'WORKFLOW_VERSION', value: '' }
        { name: 'REVIEW_AMOUNT_ABOVE', value: '0' }
        { name: 'REVIEW_TIMEOUT_S', value: '86400' }
        { name: 'REVIEW_DEFAULT', value: 'reject' }
        { name: 'COMPENSATION_LOG_RETENTION_S', value: '2592000' }
        { name: 'DEAD_LETTER_RETENTION_S', value: '1209600' }
        { name: 'ALERT_WINDOW_S', value: '3600' }
        { name: 'OPERATOR_TOKEN_LEEWAY_S', value: '60' }
        // The operator API checks Entra bearer tokens itself (orderflow.operator_auth): both empty, or both set.
        { name: 'OPERATOR_TENANT_ID', value: operatorTenantId }
        { name: 'OPERATOR_AUDIENCE', value: operatorAudience }
        // The console's "Sign in with Microsoft" (docs/console.md); empty: a pasted token only.
        { name: 'CONSOLE_CLIENT_ID', value: consoleClientId }
        // Telemetry: the worker configures the Azure Monitor distro, authenticating as the identity.
        { name: 'APPLICATIONINSIGHTS_CONNECTION_STRING', value: appInsightsConnectionString }
        { name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING', value: 'ClientId=${identityClientId};Authorization=AAD' }
        { name: 'PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY', value: 'true' }
        { name: 'PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME', value: 'orderflow' }
        // One trace in ten kept, whole (the sampler hashes the trace id): read by the worker's distro and
        // the host. Metrics are never sampled, and log records (orderflow's events and alerts) are kept
        // whatever their trace's decision (the distro's trace-based log sampling is off by default).
        { name: 'OTEL_TRACES_SAMPLER', value: 'microsoft.fixed_percentage' }
        { name: 'OTEL_TRACES_SAMPLER_ARG', value: '0.1' }
      ]
    }
  }
}

// No FTP and no basic-auth publishing: azd deploys with the deployer's Entra token.
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
