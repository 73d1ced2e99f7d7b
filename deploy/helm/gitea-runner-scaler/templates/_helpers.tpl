{{- define "grs.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "grs.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "grs.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "grs.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "grs.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "grs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "grs.selector" -}}
app.kubernetes.io/name: {{ include "grs.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "grs.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "grs.webhookSecretName" -}}
{{- .Values.webhook.secret.existingSecret | default (printf "%s-webhook" (include "grs.fullname" .)) -}}
{{- end -}}

{{- define "grs.redisSecretName" -}}
{{- if .Values.redis.enabled -}}
{{- .Values.redis.auth.existingSecret | default (printf "%s-redis" (include "grs.fullname" .)) -}}
{{- else -}}
{{- .Values.redis.external.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "grs.redisSecretKey" -}}
{{- if .Values.redis.enabled -}}{{ .Values.redis.auth.key }}{{- else -}}{{ .Values.redis.external.key }}{{- end -}}
{{- end -}}

{{- define "grs.redisUrl" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://%s-redis:6379/0" (include "grs.fullname" .) -}}
{{- else -}}
{{- required "redis.external.url is required when redis.enabled is false" .Values.redis.external.url -}}
{{- end -}}
{{- end -}}

{{/* A secret value generated once and kept across upgrades (lookup finds the live Secret). */}}
{{- define "grs.keptSecret" -}}
{{- $live := lookup "v1" "Secret" .root.Release.Namespace .name -}}
{{- if and $live $live.data (hasKey $live.data .key) -}}
{{- index $live.data .key -}}
{{- else -}}
{{- randAlphaNum 48 | b64enc -}}
{{- end -}}
{{- end -}}

{{- define "grs.commonEnv" -}}
- name: GRS_REDIS_URL
  value: {{ include "grs.redisUrl" . | quote }}
{{- if include "grs.redisSecretName" . }}
- name: GRS_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "grs.redisSecretName" . }}
      key: {{ include "grs.redisSecretKey" . }}
{{- end }}
- name: GRS_REDIS_PREFIX
  value: {{ .Values.redisPrefix | quote }}
- name: GRS_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: GRS_LOG_FORMAT
  value: json
{{- end -}}

{{- define "grs.podSecurity" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}
