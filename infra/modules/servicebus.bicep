// The Service Bus namespace and orderflow's internal queues (agent requests, agent responses). Each
// client's two queues come with its own module (client.bicep). Standard tier: duplicate detection needs
// it. No SAS keys are usable (disableLocalAuth): every sender and receiver is an Entra principal.
param name string
param location string
param tags object

@description('The internal queues: one request queue per agent and the response queue.')
param queueNames array

@description('Properties every queue shares (main.bicep says why each value).')
param queueProperties object

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
  properties: queueProperties
}]

output name string = namespace.name
output id string = namespace.id
output fullyQualifiedNamespace string = '${namespace.name}.servicebus.windows.net'
