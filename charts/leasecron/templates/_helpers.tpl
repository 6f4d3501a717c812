{{/* vim: set filetype=mustache: */}}

{{/*
The chart name, overridable with nameOverride.
*/}}
{{- define "leasecron.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The full name that prefixes every object name: "<release>-<chart>", or "<release>" alone when
the release name already contains the chart name. Truncated to 54 characters so that the
Service "<fullname>-operator" still fits in a 63-character DNS label.
*/}}
{{- define "leasecron.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Name of the operator's Deployment, Service and default ServiceAccount.
*/}}
{{- define "leasecron.operator.fullname" -}}
{{- printf "%s-operator" (include "leasecron.fullname" .) -}}
{{- end -}}

{{/*
Namespace of the namespaced objects.
*/}}
{{- define "leasecron.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "leasecron.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels on every object.
*/}}
{{- define "leasecron.labels" -}}
app.kubernetes.io/name: {{ include "leasecron.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ default .Chart.AppVersion .Values.image.tag | replace "@" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "leasecron.chart" . }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Selector labels of the operator pods; never change them: a Deployment's selector is immutable.
*/}}
{{- define "leasecron.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leasecron.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/*
Labels of the operator's objects.
*/}}
{{- define "leasecron.operator.labels" -}}
{{ include "leasecron.labels" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{/*
Labels of the application RBAC objects.
*/}}
{{- define "leasecron.app.labels" -}}
{{ include "leasecron.labels" . }}
app.kubernetes.io/component: app-rbac
{{- end -}}

{{/*
Name of the operator's ServiceAccount.
*/}}
{{- define "leasecron.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "leasecron.operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Name of the election Lease.
*/}}
{{- define "leasecron.electionLeaseName" -}}
{{- default (include "leasecron.operator.fullname" .) .Values.operator.election.leaseName -}}
{{- end -}}

{{/*
The operator image reference: repository:tag, with @digest when a digest is set.
*/}}
{{- define "leasecron.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
"true" when the operator watches every namespace (operator.namespaces is empty).
*/}}
{{- define "leasecron.clusterwide" -}}
{{- if empty .Values.operator.namespaces -}}true{{- end -}}
{{- end -}}

{{/*
The subject list naming the operator's ServiceAccount.
*/}}
{{- define "leasecron.operator.subjects" -}}
- kind: ServiceAccount
  name: {{ include "leasecron.serviceAccountName" . }}
  namespace: {{ include "leasecron.namespace" . }}
{{- end -}}

{{/*
Binds one of the operator's namespaced-concern ClusterRoles: with a ClusterRoleBinding when
the operator watches every namespace, otherwise with a RoleBinding in each watched namespace,
so the operator has no rights outside them. Call with (dict "root" $ "concern" "leases").
*/}}
{{- define "leasecron.operator.binding" -}}
{{- $root := .root -}}
{{- $name := printf "%s-%s" (include "leasecron.operator.fullname" $root) .concern -}}
{{- if include "leasecron.clusterwide" $root }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "leasecron.operator.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  {{- include "leasecron.operator.subjects" $root | nindent 2 }}
{{- else }}
{{- range $namespace := $root.Values.operator.namespaces }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $namespace }}
  labels:
    {{- include "leasecron.operator.labels" $root | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  {{- include "leasecron.operator.subjects" $root | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
A Go duration ("1h30m", "1.5s", "250ms") in milliseconds, as a float; the schema has already
checked the syntax. Call with the duration string.
*/}}
{{- define "leasecron.durationMs" -}}
{{- $units := dict "ns" 0.000001 "us" 0.001 "µs" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 -}}
{{- $total := 0.0 -}}
{{- range $part := regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" (toString .) -1 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $part -}}
{{- $unit := trimPrefix $number $part -}}
{{- $total = addf $total (mulf (float64 $number) (get $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
Refuses, at `helm install` / `helm template` time, values the schema cannot judge because they
relate two values: election timings the operator would refuse at start (it would crash-loop
instead), and application ServiceAccounts that would be bound nowhere. Renders nothing.
*/}}
{{- define "leasecron.validate" -}}
{{- $election := .Values.operator.election -}}
{{- $lease := include "leasecron.durationMs" $election.leaseDuration | float64 -}}
{{- $renew := include "leasecron.durationMs" $election.renewDeadline | float64 -}}
{{- $retry := include "leasecron.durationMs" $election.retryPeriod | float64 -}}
{{- range $name, $ms := dict "leaseDuration" $lease "renewDeadline" $renew "retryPeriod" $retry -}}
{{- if le $ms 0.0 -}}
{{- fail (printf "operator.election.%s (%s) must be greater than zero" $name (get $election $name)) -}}
{{- end -}}
{{- end -}}
{{- if lt $lease (addf $renew 1000.0) -}}
{{- fail (printf "operator.election.leaseDuration (%s) must be at least renewDeadline (%s) + 1s, so a standby never takes over while the leader may still think it leads" $election.leaseDuration $election.renewDeadline) -}}
{{- end -}}
{{- if le $renew (mulf $retry 1.2) -}}
{{- fail (printf "operator.election.renewDeadline (%s) must be greater than 1.2 times retryPeriod (%s), so the leader gets more than one try to renew" $election.renewDeadline $election.retryPeriod) -}}
{{- end -}}
{{- if and .Values.app.serviceAccounts (not .Values.app.namespaces) -}}
{{- fail "app.serviceAccounts is set but app.namespaces is empty: list the namespaces where your application pods run, or the ServiceAccounts are bound nowhere" -}}
{{- end -}}
{{- range $i, $sa := .Values.app.serviceAccounts -}}
{{- if and $sa.namespace (not (has $sa.namespace $.Values.app.namespaces)) -}}
{{- fail (printf "app.serviceAccounts[%d] (%s/%s): namespace %q is not in app.namespaces; add it there so the chart creates its RoleBinding" $i $sa.namespace $sa.name $sa.namespace) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.app.namespaces (not .Values.app.serviceAccounts) -}}
{{- fail "app.namespaces is set but app.serviceAccounts is empty: list the ServiceAccounts of your application pods" -}}
{{- end -}}
{{- end -}}
