// Log Analytics and workspace-based Application Insights, which takes Entra ID-authenticated telemetry only.
param logAnalyticsName string
param appInsightsName string
param location string
param tags object

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2026-03-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: 30
    // Queries and ingestion with an Entra token only: the workspace's shared keys authenticate nothing.
    features: {
      disableLocalAuth: true
    }
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: appInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: logAnalytics.id
    // The instrumentation key in the connection string authenticates nothing: ingestion needs an Entra
    // token (Monitoring Metrics Publisher, granted to the app identity in roles.bicep).
    DisableLocalAuth: true
  }
}

output appInsightsName string = appInsights.name
output appInsightsConnectionString string = appInsights.properties.ConnectionString
output logAnalyticsId string = logAnalytics.id
