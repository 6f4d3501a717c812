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
