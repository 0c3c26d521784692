{{/*
The chart's name, or nameOverride.
*/}}
{{- define "ferry.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: fullnameOverride, else the release's
name when it already holds the chart's, else release-chart. Kept to 47
characters so that a suffix (-relay-metrics) fits in 63.
*/}}
{{- define "ferry.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 47 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels of every object; "component" is relay, console or migrate.
*/}}
{{- define "ferry.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ferry.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{/*
The labels that select a component's pods.
*/}}
{{- define "ferry.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ferry.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The image of every container.
*/}}
{{- define "ferry.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/*
The existing Secret of the database and broker URLs; the chart never
creates it.
*/}}
{{- define "ferry.secretName" -}}
{{- required "secret.name: name the existing Secret that holds the database and broker URLs (the chart never puts a URL in a ConfigMap)" .Values.secret.name }}
{{- end }}

{{/*
What every pod spec of the chart shares.
*/}}
{{- define "ferry.podCommon" -}}
# ferry calls no Kubernetes API, and reads no service's address from the
# environment.
automountServiceAccountToken: false
enableServiceLinks: false
{{- with .Values.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{/*
The config file of the relay or the console: the shared settings
(config.*), then the command's own section. Its argument is a dict of
"root" and "section" (a dict: the command's section, keyed by its name).
*/}}
{{- define "ferry.configFile" -}}
{{- $c := .root.Values.config }}
{{- $file := dict "table" $c.table "log_level" $c.logLevel "log_format" $c.logFormat }}
{{- $file = merge $file .section }}
{{- toYaml $file }}
{{- end }}

{{/*
Fails when a map of settings (the relay's or the console's) holds a key
the chart sets from a value of its own, or a URL: URLs come from the
Secret only.
*/}}
{{- define "ferry.checkSettings" -}}
{{- range $k, $v := .settings }}
{{- if or (contains "url" (lower $k)) (contains "password" (lower $k)) (contains "secret" (lower $k)) (contains "token" (lower $k)) }}
{{- fail (printf "%s.%s: URLs and credentials come from the existing Secret (secret.name), never from values" $.where $k) }}
{{- end }}
{{- if has $k $.owned }}
{{- fail (printf "%s.%s: set by the chart from a value of its own (see the chart's README)" $.where $k) }}
{{- end }}
{{- end }}
{{- end }}
