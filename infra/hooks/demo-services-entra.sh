#!/bin/sh
# azd hooks (azure.yaml) of the demo services' Entra ID app registration: what Bicep cannot create
# without the Microsoft Graph extension (docs/deploy.md#the-demo-on-azure).
#
#   pre  (preprovision):  find or create the registration orderflow-demo-services-<env>: app roles
#                         Orderflow.Agent (applications: orderflow's agents) and Orderflow.DemoDriver
#                         (people and applications: make demo-azure's reads), app ID URI api://<client id>,
#                         v2.0 tokens, a delegated scope the Azure CLI is pre-authorized for (the deployer's
#                         az/azd sign-in gets tokens for it without a consent prompt), and its service
#                         principal; then azd env set DEMO_SERVICES_CLIENT_ID.
#   post (postprovision): assign Orderflow.Agent to orderflow's app identity (AZURE_APP_IDENTITY_PRINCIPAL_ID)
#                         and Orderflow.DemoDriver to the deployer (AZURE_PRINCIPAL_ID, AZURE_PRINCIPAL_TYPE).
#
# Each step is idempotent; nothing runs when DEPLOY_DEMO_SERVICES is false. Needs the Azure CLI signed in to
# the tenant as someone allowed to register applications (and, for post, to assign their app roles).
set -eu

step="${1:?usage: demo-services-entra.sh pre|post}"
[ "${DEPLOY_DEMO_SERVICES:-true}" = "false" ] && exit 0

AGENT_ROLE="Orderflow.Agent"
DRIVER_ROLE="Orderflow.DemoDriver"
AZURE_CLI_CLIENT_ID="04b07795-8ddb-461a-bbee-02f9e1bf7b46"
GRAPH="https://graph.microsoft.com/v1.0"
NAME="orderflow-demo-services-${AZURE_ENV_NAME:?azd sets AZURE_ENV_NAME}"

new_id() { python3 -c 'import uuid; print(uuid.uuid4())'; }

# graph METHOD PATH [BODY]: a Microsoft Graph call as the signed-in user.
graph() {
  if [ -n "${3:-}" ]; then
    az rest --method "$1" --uri "$GRAPH/$2" --headers Content-Type=application/json --body "$3"
  else
    az rest --method "$1" --uri "$GRAPH/$2"
  fi
}

create_registration() {
  roles="[{\"allowedMemberTypes\": [\"Application\"], \"displayName\": \"orderflow agents\",
    \"value\": \"$AGENT_ROLE\", \"id\": \"$(new_id)\", \"isEnabled\": true,
    \"description\": \"Call the demo services as orderflow's agents\"},
   {\"allowedMemberTypes\": [\"User\", \"Application\"], \"displayName\": \"orderflow demo driver\",
    \"value\": \"$DRIVER_ROLE\", \"id\": \"$(new_id)\", \"isEnabled\": true,
    \"description\": \"Read the demo services' audit and order facts\"}]"
  app_id=$(az ad app create --display-name "$NAME" --sign-in-audience AzureADMyOrg --app-roles "$roles" \
    --query appId -o tsv)
  object_id=$(az ad app show --id "$app_id" --query id -o tsv)
  az ad app update --id "$app_id" --identifier-uris "api://$app_id" --set api.requestedAccessTokenVersion=2
  scope_id=$(new_id)
  graph PATCH "applications/$object_id" "{\"api\": {\"oauth2PermissionScopes\": [{\"id\": \"$scope_id\",
    \"value\": \"demo.read\", \"type\": \"User\", \"isEnabled\": true,
    \"adminConsentDisplayName\": \"Read the orderflow demo services\",
    \"adminConsentDescription\": \"Read the demo services' audit and order facts as the signed-in user\",
    \"userConsentDisplayName\": \"Read the orderflow demo services\",
    \"userConsentDescription\": \"Read the demo services' audit and order facts as you\"}]}}"
  # Pre-authorized once the scope exists: a second PATCH.
  graph PATCH "applications/$object_id" "{\"api\": {\"preAuthorizedApplications\": [{
    \"appId\": \"$AZURE_CLI_CLIENT_ID\", \"delegatedPermissionIds\": [\"$scope_id\"]}]}}"
  az ad sp create --id "$app_id" >/dev/null
  echo "$app_id"
}

pre() {
  app_id="${DEMO_SERVICES_CLIENT_ID:-}"
  [ -n "$app_id" ] || app_id=$(az ad app list --display-name "$NAME" --query "[0].appId" -o tsv)
  [ -n "$app_id" ] || app_id=$(create_registration | tail -n 1)
  azd env set DEMO_SERVICES_CLIENT_ID "$app_id"
}

# assign PRINCIPAL_OBJECT_ID users|servicePrincipals ROLE_VALUE
assign() {
  role_id=$(az ad app show --id "$DEMO_SERVICES_CLIENT_ID" --query "appRoles[?value=='$3'].id | [0]" -o tsv)
  resource=$(az ad sp show --id "$DEMO_SERVICES_CLIENT_ID" --query id -o tsv)
  held=$(graph GET "$2/$1/appRoleAssignments" \
    | python3 -c "import json, sys; print(sum(a['appRoleId'] == '$role_id' and a['resourceId'] == '$resource' for a in json.load(sys.stdin)['value']))")
  [ "$held" != "0" ] || graph POST "$2/$1/appRoleAssignments" \
    "{\"principalId\": \"$1\", \"resourceId\": \"$resource\", \"appRoleId\": \"$role_id\"}" >/dev/null
}

post() {
  : "${DEMO_SERVICES_CLIENT_ID:?the pre step sets DEMO_SERVICES_CLIENT_ID}"
  assign "${AZURE_APP_IDENTITY_PRINCIPAL_ID:?the template outputs AZURE_APP_IDENTITY_PRINCIPAL_ID}" \
    servicePrincipals "$AGENT_ROLE"
  if [ -n "${AZURE_PRINCIPAL_ID:-}" ]; then
    kind=users
    [ "${AZURE_PRINCIPAL_TYPE:-User}" = "User" ] || kind=servicePrincipals
    assign "$AZURE_PRINCIPAL_ID" "$kind" "$DRIVER_ROLE"
  fi
}

case "$step" in
  pre) pre ;;
  post) post ;;
  *) echo "usage: demo-services-entra.sh pre|post" >&2; exit 2 ;;
esac
