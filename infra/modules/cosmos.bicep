// Cosmos DB (NoSQL API, serverless): one database holding the order store (orders) and the state store
// (orderstate), each partitioned on /orderId with id = orderId, so every point read is one request,
// the circuit breakers' documents (breakers, partitioned on /id) and the operator alerts (alerts,
// partitioned on /day, with a time-to-live).
// Containers never share a transaction, so the order document and the state record stay two writes
// (the dual-write the design handles). No keys: the app's identity holds the data-plane role on this
// database only, and data-plane RBAC cannot create containers, so they are declared here.
param name string
param location string
param tags object
param databaseName string

@description('Principal id of the app identity: Cosmos DB Built-in Data Contributor on the database.')
param appPrincipalId string

@description('Principal id given Cosmos DB Built-in Data Reader on the database; empty grants nothing.')
param deployerPrincipalId string = ''

var dataContributorRoleId = '00000000-0000-0000-0000-000000000002'
var dataReaderRoleId = '00000000-0000-0000-0000-000000000001'

resource account 'Microsoft.DocumentDB/databaseAccounts@2026-03-15' = {
  // checkov:skip=CKV_AZURE_101:no private endpoint or virtual network in this template; the data plane takes Entra ID tokens only (local auth off)
  // checkov:skip=CKV_AZURE_99:no virtual network and no fixed egress addresses (Flex Consumption without VNet integration) to restrict to; Entra ID only
  name: name
  location: location
  tags: tags
  kind: 'GlobalDocumentDB'
  properties: {
    databaseAccountOfferType: 'Standard'
    consistencyPolicy: {
      defaultConsistencyLevel: 'Session'
    }
    locations: [
      {
        locationName: location
        failoverPriority: 0
        isZoneRedundant: false
      }
    ]
    capabilities: [
      {
        name: 'EnableServerless'
      }
    ]
    disableLocalAuth: true
    disableKeyBasedMetadataWriteAccess: true
    minimalTlsVersion: 'Tls12'
    publicNetworkAccess: 'Enabled'
  }
}

resource database 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases@2026-03-15' = {
  parent: account
  name: databaseName
  properties: {
    resource: {
      id: databaseName
    }
  }
}

// Order documents are only point-read and replaced by id: index nothing but the partition key.
resource ordersContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2026-03-15' = {
  parent: database
  name: 'orders'
  properties: {
    resource: {
      id: 'orders'
      partitionKey: {
        paths: [
          '/orderId'
        ]
        kind: 'Hash'
        version: 2
      }
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/orderId/?'
          }
        ]
        excludedPaths: [
          {
            path: '/*'
          }
        ]
      }
    }
  }
}

// State records: the loops' queries (orderflow.stores.cosmos.state_query_sql) filter on processState
// with one range each, which a composite index (equality or IN first, the range last) serves:
// supervisor sweep (processState, completeBy), starter (processState, nextAttemptAt), admission's
// per-client count (clientId, processState), retention (processState, updatedAt). The operator API's
// order list (operator_api.listing) filters processState IN with one updatedAt range, and optionally
// clientId or workflowVersion by equality: (processState, updatedAt), and (clientId, processState,
// updatedAt), (workflowVersion, processState, updatedAt). The bulky nested fields no query filters on
// (the timeline among them) are not indexed, which keeps the six writes per order cheaper.
resource stateContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2026-03-15' = {
  parent: database
  name: 'orderstate'
  properties: {
    resource: {
      id: 'orderstate'
      partitionKey: {
        paths: [
          '/orderId'
        ]
        kind: 'Hash'
        version: 2
      }
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/*'
          }
        ]
        excludedPaths: [
          {
            path: '/steps/*'
          }
          {
            path: '/compensationLog/*'
          }
          {
            path: '/attemptHistory/*'
          }
          {
            path: '/timeline/*'
          }
          {
            path: '/retryBudget/*'
          }
          {
            path: '/lastError/*'
          }
          {
            path: '/corrections/*'
          }
          {
            path: '/"_etag"/?'
          }
        ]
        compositeIndexes: [
          [
            {
              path: '/processState'
              order: 'ascending'
            }
            {
              path: '/completeBy'
              order: 'ascending'
            }
          ]
          [
            {
              path: '/processState'
              order: 'ascending'
            }
            {
              path: '/nextAttemptAt'
              order: 'ascending'
            }
          ]
          [
            {
              path: '/clientId'
              order: 'ascending'
            }
            {
              path: '/processState'
              order: 'ascending'
            }
          ]
          [
            {
              path: '/processState'
              order: 'ascending'
            }
            {
              path: '/updatedAt'
              order: 'ascending'
            }
          ]
          [
            {
              path: '/clientId'
              order: 'ascending'
            }
            {
              path: '/processState'
              order: 'ascending'
            }
            {
              path: '/updatedAt'
              order: 'ascending'
            }
          ]
          [
            {
              path: '/workflowVersion'
              order: 'ascending'
            }
            {
              path: '/processState'
              order: 'ascending'
            }
            {
              path: '/updatedAt'
              order: 'ascending'
            }
          ]
        ]
      }
    }
  }
}

// Timeline entries moved out of state records (orderflow.timeline): append-only, read by one
// single-partition query per order (WHERE orderId = @orderId), so nothing but the partition key is indexed.
resource historyContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2026-03-15' = {
  parent: database
  name: 'orderhistory'
  properties: {
    resource: {
      id: 'orderhistory'
      partitionKey: {
        paths: [
          '/orderId'
        ]
        kind: 'Hash'
        version: 2
      }
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/orderId/?'
          }
        ]
        excludedPaths: [
          {
            path: '/*'
          }
        ]
      }
    }
  }
}

// Circuit breakers (orderflow.breaker): a small document per remote dependency, id = the dependency,
// read by id and replaced on its ETag; never queried, so only the partition key is indexed. A container
// of its own, so no query over the state records meets one.
resource breakersContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2026-03-15' = {
  parent: database
  name: 'breakers'
  properties: {
    resource: {
      id: 'breakers'
      partitionKey: {
        paths: [
          '/id'
        ]
        kind: 'Hash'
        version: 2
      }
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/id/?'
          }
        ]
        excludedPaths: [
          {
            path: '/*'
          }
        ]
      }
    }
  }
}

// Operator alerts and the supervisor's sweep documents (orderflow.alerts): partitioned by UTC day, so a
// listing reads one day's partition at a time newest first (WHERE day = @day [AND kind ...] [AND at >= @since]
// ORDER BY at DESC, orderflow.stores.cosmos.alert_query_sql). A default time-to-live of 14 days bounds the
// container (orderflow.alerts.ALERT_TTL_S); a sweep document sets its own, one hour, and a per-minute sweep
// tally (kind supervisor_tally, read by the activity chart through the same (kind, at DESC) index) 26 hours.
// A dead-letter replay's record (kind deadletter_replay) is looked up across days by its queue and dead
// letter id or replay message id (orderflow.stores.cosmos.replay_query_sql); no other document has them.
resource alertsContainer 'Microsoft.DocumentDB/databaseAccounts/sqlDatabases/containers@2026-03-15' = {
  parent: database
  name: 'alerts'
  properties: {
    resource: {
      id: 'alerts'
      partitionKey: {
        paths: [
          '/day'
        ]
        kind: 'Hash'
        version: 2
      }
      defaultTtl: 1209600
      indexingPolicy: {
        indexingMode: 'consistent'
        automatic: true
        includedPaths: [
          {
            path: '/day/?'
          }
          {
            path: '/kind/?'
          }
          {
            path: '/at/?'
          }
          {
            path: '/queue/?'
          }
          {
            path: '/deadLetterId/?'
          }
          {
            path: '/replayMessageId/?'
          }
        ]
        excludedPaths: [
          {
            path: '/*'
          }
        ]
        compositeIndexes: [
          [
            {
              path: '/kind'
              order: 'ascending'
            }
            {
              path: '/at'
              order: 'descending'
            }
          ]
        ]
      }
    }
  }
}

// The data-plane role assignments run one after another and after every container: run in parallel
// with them or with each other, a first deploy can fail with a transient 412 or principal-not-found.
resource appDataRole 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2026-03-15' = {
  parent: account
  dependsOn: [
    ordersContainer
    stateContainer
    historyContainer
    breakersContainer
    alertsContainer
  ]
  name: guid(account.id, databaseName, appPrincipalId, dataContributorRoleId)
  properties: {
    roleDefinitionId: '${account.id}/sqlRoleDefinitions/${dataContributorRoleId}'
    principalId: appPrincipalId
    scope: '${account.id}/dbs/${databaseName}'
  }
}

resource deployerReadRole 'Microsoft.DocumentDB/databaseAccounts/sqlRoleAssignments@2026-03-15' = if (!empty(deployerPrincipalId)) {
  parent: account
  dependsOn: [
    appDataRole
  ]
  name: guid(account.id, databaseName, deployerPrincipalId, dataReaderRoleId)
  properties: {
    roleDefinitionId: '${account.id}/sqlRoleDefinitions/${dataReaderRoleId}'
    principalId: deployerPrincipalId
    scope: '${account.id}/dbs/${databaseName}'
  }
}

output endpoint string = account.properties.documentEndpoint
output name string = account.name
