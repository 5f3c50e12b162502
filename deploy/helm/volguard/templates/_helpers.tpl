{{/* The name of every object: the release name, or release-chart when they differ. */}}
{{- define "volguard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the agent's pods (never change them on upgrade). */}}
{{- define "volguard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "volguard.labels" -}}
{{ include "volguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/part-of: volguard
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "volguard.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Relabelling shared by the ServiceMonitor and the PodMonitor: a `node` label per series. */}}
{{- define "volguard.relabelings" -}}
- sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: node
  action: replace
{{- end -}}
