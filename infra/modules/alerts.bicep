// Alert rules on what an operator must act on (docs/operations.md#when-an-alert-fires): a dead letter
// on an internal queue, dead letters piling up on one client's queue, orders stuck past their deadline,
// a failed compensation, a spent retry budget.
param location string
param tags object
param nameSuffix string
param serviceBusName string
param appInsightsName string

@description('orderflow\'s own queues (agent requests, agent responses): a dead letter on any of them fires at once.')
param internalQueueNames array

@description('Dead letters a client queue (inbound or reply) may hold before its alert fires: a client can resend a refused message at will.')
@minValue(0)
param clientDeadLetterThreshold int = 10

@description('E-mail address notified; empty: the rules fire without an action group (visible in the portal).')
param alertEmail string = ''

var hasEmail = !empty(alertEmail)

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: serviceBusName
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource operatorGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (hasEmail) {
  name: 'ag-${nameSuffix}'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'orderflow'
    enabled: true
    emailReceivers: [
      {
        name: 'operators'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

var metricActions = hasEmail ? [{ actionGroupId: operatorGroup.id }] : []
var logActions = hasEmail ? { actionGroups: [operatorGroup.id] } : {}

// DeadletteredMessages is a per-queue gauge (messages held in the queue's dead-letter sub-queue), split
// by EntityName: each queue is a time series of its own and fires at most once until it resolves. On
// orderflow's own queues any dead letter is orderflow's to fix. A client's two queues hold what that client
// sent or failed to read, which it can repeat at will: they fire only above a threshold, each on its own,
// so one client's resent bad message fires one alert for its queue and never hides another's.
// (Each rule spells its criterion out: tests/infra type-checks what a resource writes, not a variable.)
resource deadLetters 'Microsoft.Insights/metricAlerts@2026-01-01' = {
  name: 'alert-dead-letters-${nameSuffix}'
  location: 'global'
  tags: tags
  properties: {
    description: 'A message was dead-lettered on an internal orderflow queue: read its DeadLetterReason (docs/operations.md).'
    severity: 2
    enabled: true
    scopes: [
      namespace.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadletteredMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: internalQueueNames
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    autoMitigate: true
    actions: metricActions
  }
}

resource clientDeadLetters 'Microsoft.Insights/metricAlerts@2026-01-01' = {
  name: 'alert-client-dead-letters-${nameSuffix}'
  location: 'global'
  tags: tags
  properties: {
    description: 'A client queue holds more than ${clientDeadLetterThreshold} dead letters: the client keeps sending messages orderflow refuses, or fails to read its replies (docs/operations.md).'
    severity: 3
    enabled: true
    scopes: [
      namespace.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadletteredMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Exclude'
              values: internalQueueNames
            }
          ]
          operator: 'GreaterThan'
          threshold: clientDeadLetterThreshold
          timeAggregation: 'Maximum'
        }
      ]
    }
    autoMitigate: true
    actions: metricActions
  }
}

// orderflow.stuck_orders: Processing orders past completeBy at every sweep of the window (a single
// sweep's count is normal churn; the supervisor recovers them within a sweep or two). Evaluated once per
// window, like the retry budget's rule: a third of the price of every 5 minutes (docs/deploy.md).
resource stuckOrders 'Microsoft.Insights/scheduledQueryRules@2026-03-01' = {
  name: 'alert-stuck-orders-${nameSuffix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'orderflow: orders stuck past their deadline'
    description: 'Every supervisor sweep of the last 15 minutes found orders Processing past completeBy (orderflow.stuck_orders).'
    severity: 2
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == "orderflow.stuck_orders" | summarize stuck = min(value), sweeps = count() | where sweeps > 0 and stuck > 0'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: logActions
  }
}

// telemetry.alert("compensation_failed"): counted as orderflow.alerts with alert=compensation_failed.
resource compensationFailed 'Microsoft.Insights/scheduledQueryRules@2026-03-01' = {
  name: 'alert-compensation-failed-${nameSuffix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'orderflow: compensation failed'
    description: 'An order ended CompensationFailed: fix the cause, then orderflow compensate <order id> (docs/operations.md).'
    severity: 1
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == "orderflow.alerts" and tostring(customDimensions.alert) == "compensation_failed" | summarize failed = sum(valueSum) | where failed > 0'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: false
    actions: logActions
  }
}

// A spent RETRY_BUDGET shows twice: a step refused (telemetry.event("budget.exhausted"), counted as
// orderflow.budget_exhausted) and the supervisor giving an order up (alert order_gave_up, counted as
// orderflow.gave_up with reason=retry_budget_exhausted).
resource budgetExhausted 'Microsoft.Insights/scheduledQueryRules@2026-03-01' = {
  name: 'alert-budget-exhausted-${nameSuffix}'
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: 'orderflow: retry budget exhausted'
    description: 'Orders spent their end-to-end retry budget (orderflow.budget_exhausted, or orderflow.gave_up with reason retry_budget_exhausted): a remote service keeps failing.'
    severity: 2
    enabled: true
    scopes: [
      appInsights.id
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == "orderflow.budget_exhausted" or (name == "orderflow.gave_up" and tostring(customDimensions.reason) == "retry_budget_exhausted") | summarize exhausted = sum(valueSum) by step = tostring(customDimensions.step) | where exhausted > 0'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: true
    actions: logActions
  }
}
