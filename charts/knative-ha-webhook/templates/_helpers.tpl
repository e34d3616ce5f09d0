{{/*
Chart name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "knative-ha-webhook.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: <release>-<chart>, or <release> when it already contains the chart name.
Truncated to 63 characters.
*/}}
{{- define "knative-ha-webhook.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "knative-ha-webhook.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable across upgrades (never add version-like labels here).
*/}}
{{- define "knative-ha-webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "knative-ha-webhook.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Common labels on every object.
*/}}
{{- define "knative-ha-webhook.labels" -}}
helm.sh/chart: {{ include "knative-ha-webhook.chart" . }}
{{ include "knative-ha-webhook.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: knative-ha-webhook
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
ServiceAccount name.
*/}}
{{- define "knative-ha-webhook.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "knative-ha-webhook.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: repository@digest when a digest is set, else repository:tag (tag defaults to appVersion).
No image is published: rendering fails while image.repository is empty, the never-published
ghcr.io default (unless the chart is the release pipeline's, annotated knativeha.dev/image-published
"true"), or a documentation placeholder (REGISTRY, <...>, example.com), instead of
installing pods that can never pull their image (with failurePolicy Ignore, nothing would say so).
*/}}
{{- define "knative-ha-webhook.image" -}}
{{- $repo := .Values.image.repository }}
{{- $how := "build the image and push it to a registry your cluster pulls from (docker build -t REGISTRY/knative-ha-webhook:TAG . && docker push ..., or without Docker: scripts/release/build-image, then skopeo copy oci-archive:knative-ha-webhook-VERSION.oci.tar docker://REGISTRY/knative-ha-webhook:TAG; see \"Getting an image\" in docs/install.md), then pass --set image.repository=REGISTRY/knative-ha-webhook (and image.tag when TAG is not the chart's appVersion)" }}
{{- if not $repo }}
{{- fail (printf "image.repository is required: no knative-ha-webhook image is published; %s" $how) }}
{{- end }}
{{- $published := eq (index (.Chart.Annotations | default dict) "knativeha.dev/image-published" | toString) "true" }}
{{- $placeholder := or (and (not $published) (eq $repo "ghcr.io/knative-ha-webhook/knative-ha-webhook")) (hasPrefix "/" $repo) (contains "REGISTRY" $repo) (contains "<" $repo) (contains ">" $repo) (contains "example.com" $repo) (contains "example.org" $repo) (contains "example.net" $repo) }}
{{- if $placeholder }}
{{- fail (printf "image.repository %q is a placeholder or the never-published default, not an image your cluster can pull; %s" $repo $how) }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Name of the TLS Secret the server mounts: cert-manager's, or the user's existing one.
*/}}
{{- define "knative-ha-webhook.tlsSecretName" -}}
{{- if .Values.certManager.enabled }}
{{- printf "%s-tls" (include "knative-ha-webhook.fullname" .) }}
{{- else }}
{{- required "tls.existingSecret is required when certManager.enabled=false: create a kubernetes.io/tls Secret in the release namespace (see certs/README.md) and set its name" .Values.tls.existingSecret }}
{{- end }}
{{- end }}

{{/*
Name of the serving Certificate (cert-manager mode); cert-manager.io/inject-ca-from points at it.
*/}}
{{- define "knative-ha-webhook.servingCertName" -}}
{{- printf "%s-serving" (include "knative-ha-webhook.fullname" .) }}
{{- end }}

{{/*
server.shutdownDelay, a Go duration (the schema admits "10s", "1m", "1500ms", "1m30s", ...), in
seconds rounded up: the grace-period check below compares whole seconds.
*/}}
{{- define "knative-ha-webhook.shutdownDelaySeconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" .Values.server.shutdownDelay -1 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . | float64 }}
{{- $unit := regexReplaceAll "^[0-9]+(\\.[0-9]+)?" . "" }}
{{- $total = addf $total (mulf $number (get $units $unit)) }}
{{- end }}
{{- ceil $total | int }}
{{- end }}

{{/*
Cross-value checks the JSON schema cannot express. Included by the webhook configuration,
so `helm template` / `helm install` fail with a clear message.
*/}}
{{- define "knative-ha-webhook.validate" -}}
{{- if has .Release.Namespace .Values.governedNamespaces }}
{{- fail (printf "governedNamespaces must not contain the release namespace %q: the webhook must never govern its own namespace (install it in its own namespace, e.g. knative-ha-webhook)" .Release.Namespace) }}
{{- end }}
{{- /* After the delay the listener closes and in-flight reviews finish; the API server gives up on
      a review after webhook.timeoutSeconds, so delay + timeout is the longest a shutdown needs. */}}
{{- $needed := add (int (include "knative-ha-webhook.shutdownDelaySeconds" .)) (int .Values.webhook.timeoutSeconds) }}
{{- if lt (int .Values.terminationGracePeriodSeconds) (int $needed) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least server.shutdownDelay (%s) + webhook.timeoutSeconds (%d), so in-flight requests can finish before the kill" (int .Values.terminationGracePeriodSeconds) .Values.server.shutdownDelay (int .Values.webhook.timeoutSeconds)) }}
{{- end }}
{{- if eq .Values.webhook.failurePolicy "Fail" }}
{{- range .Values.governedNamespaces }}
{{- if or (hasPrefix "kube-" .) (eq . "default") }}
{{- fail (printf "governedNamespaces must not contain %q under webhook.failurePolicy=Fail: a webhook outage would then refuse every Deployment, HPA, PDB and ConfigMap write of the cluster's own namespace; govern Knative's namespaces only, or keep failurePolicy Ignore" .) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.serviceAccount (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- fail "serviceAccount.name is required when serviceAccount.create=false: otherwise every role would be bound to the namespace's default ServiceAccount, which every pod there runs as" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.networkPolicy.enabled (not .Values.networkPolicy.metricsNamespaceLabels) }}
{{- fail "serviceMonitor.enabled: Prometheus could not scrape, the NetworkPolicy closes the metrics port to every pod; set networkPolicy.metricsNamespaceLabels to the labels of Prometheus' namespace (e.g. kubernetes.io/metadata.name: monitoring)" }}
{{- end }}
{{- if and .Values.defaultPolicy.enabled (not (has .Values.defaultPolicy.spec.targetNamespace .Values.governedNamespaces)) }}
{{- fail (printf "defaultPolicy.spec.targetNamespace %q is not one of governedNamespaces %v: the webhook would never see its objects" .Values.defaultPolicy.spec.targetNamespace .Values.governedNamespaces) }}
{{- end }}
{{- if not .Values.certManager.enabled }}
{{- $_ := include "knative-ha-webhook.tlsSecretName" . }}
{{- $_ := required "tls.caBundle is required when certManager.enabled=false: the base64-encoded PEM CA that signed the serving certificate (base64 -w0 ca.crt; see certs/README.md)" .Values.tls.caBundle }}
{{- if not (contains "-----BEGIN CERTIFICATE-----" (b64dec .Values.tls.caBundle)) }}
{{- fail "tls.caBundle must be the base64 of a PEM CA certificate (base64 -w0 ca.crt), not the PEM itself or a key" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Rules granted in the governed namespaces (rbac.yaml): a Role and RoleBinding in one namespace
(rbac.scope=namespaced), or a ClusterRole and ClusterRoleBinding (rbac.scope=cluster).
Arguments: root (the chart context), namespace (namespaced only), suffix (of the name), rules.
*/}}
{{- define "knative-ha-webhook.namespacedGrant" -}}
{{- $name := printf "%s-%s" (include "knative-ha-webhook.fullname" .root) .suffix }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ .namespace }}
  labels:
    {{- include "knative-ha-webhook.labels" .root | nindent 4 }}
rules:
  {{- toYaml .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ .namespace }}
  labels:
    {{- include "knative-ha-webhook.labels" .root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "knative-ha-webhook.serviceAccountName" .root }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}

{{- define "knative-ha-webhook.clusterGrant" -}}
{{- $name := printf "%s-%s" (include "knative-ha-webhook.fullname" .root) .suffix }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "knative-ha-webhook.labels" .root | nindent 4 }}
rules:
  {{- toYaml .rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "knative-ha-webhook.labels" .root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ include "knative-ha-webhook.serviceAccountName" .root }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}

{{/*
Where this chart is installed from, for the commands NOTES prints: the annotation
knativeha.dev/chart-ref (charts/knative-ha-webhook in a checkout; the release pipeline's
scripts/release/release-chart writes the OCI reference), with --version for a published chart.
*/}}
{{- define "knative-ha-webhook.chartRef" -}}
{{- $annotations := .Chart.Annotations | default dict }}
{{- $ref := index $annotations "knativeha.dev/chart-ref" | default "charts/knative-ha-webhook" }}
{{- if hasPrefix "oci://" $ref }}
{{- printf "%s --version %s" $ref .Chart.Version }}
{{- else }}
{{- $ref }}
{{- end }}
{{- end }}

{{/*
Name of the MutatingWebhookConfiguration's webhook. The API server labels its admission metrics
with it (apiserver_admission_webhook_fail_open_count{name=...}, ..._rejection_count{name=...}),
which the PrometheusRule's KnativeHAWebhookFailOpen and KnativeHAWebhookRejected alerts select.
*/}}
{{- define "knative-ha-webhook.mutatingWebhookName" -}}
mutate.knativeha.dev
{{- end }}

{{/*
The Prometheus Operator's APIs: a ServiceMonitor or PrometheusRule is rendered only when the
cluster serves its API (an install would otherwise fail on `no matches for kind` and leave the
webhook configurations registered). `helm template` has none of them unless given
--api-versions monitoring.coreos.com/v1/ServiceMonitor (resp. PrometheusRule).
Each yields "true" or "".
*/}}
{{- define "knative-ha-webhook.serviceMonitorAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}true{{ end }}
{{- end }}
{{- define "knative-ha-webhook.prometheusRuleAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule" }}true{{ end }}
{{- end }}

{{/*
Runbook of every alert: the troubleshooting section of docs/operations.md.
*/}}
{{- define "knative-ha-webhook.runbookURL" -}}
{{- printf "%s/blob/main/docs/operations.md#troubleshooting" (.Chart.Home | trimSuffix "/") }}
{{- end }}

{{/*
"true" when the rights in the governed namespaces are granted cluster-wide: rbac.scope=cluster, or
knativeOperator (an Operator reinstall deletes the namespace, and a Role with it).
*/}}
{{- define "knative-ha-webhook.clusterScope" -}}
{{- if or (eq .Values.rbac.scope "cluster") .Values.knativeOperator }}true{{ end }}
{{- end }}
