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

{{/* An image's reference: (global.imageRegistry or its registry)/repository:tag (tag: the default given).
A repository that starts with a registry host (a dot, a port or localhost in its first part, as values
before image.registry named it) brings its own registry, which global.imageRegistry still replaces. */}}
{{- define "grs.imageRef" -}}
{{- $parts := splitList "/" .image.repository -}}
{{- $first := first $parts -}}
{{- $registry := .image.registry -}}
{{- $repository := .image.repository -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $registry = $first -}}
{{- $repository = join "/" (rest $parts) -}}
{{- end -}}
{{- $registry = .root.Values.global.imageRegistry | default $registry -}}
{{ if $registry }}{{ $registry }}/{{ end }}{{ $repository }}:{{ .image.tag | default .tag }}
{{- end -}}

{{- define "grs.image" -}}
{{ include "grs.imageRef" (dict "root" . "image" .Values.image "tag" .Chart.AppVersion) }}
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

{{- define "grs.cacheSecretName" -}}
{{- .Values.cache.secret.existingSecret | default (printf "%s-cache" (include "grs.fullname" .)) -}}
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

{{/* A number as a plain decimal: `1048576`, never Go's `1.048576e+06` (values arrive as float64). */}}
{{- define "grs.num" -}}
{{- if eq (float64 .) (float64 (int64 .)) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- end -}}

{{/* The Secret/key pairs the chart generates (a pre-install hook creates them once), as "name:key". */}}
{{- define "grs.generatedSecrets" -}}
{{- $out := list -}}
{{- if not .Values.webhook.secret.existingSecret -}}
{{- $out = append $out (printf "%s:%s" (include "grs.webhookSecretName" .) .Values.webhook.secret.key) -}}
{{- if .Values.webhook.manage.enabled -}}
{{- $out = append $out (printf "%s:%s" (include "grs.webhookSecretName" .) .Values.webhook.manage.key) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.redis.enabled (not .Values.redis.auth.existingSecret) -}}
{{- $out = append $out (printf "%s:%s" (include "grs.redisSecretName" .) .Values.redis.auth.key) -}}
{{- end -}}
{{- if and .Values.cache.enabled (not .Values.cache.secret.existingSecret) -}}
{{- $out = append $out (printf "%s:%s" (include "grs.cacheSecretName" .) .Values.cache.secret.key) -}}
{{- end -}}
{{- join " " $out -}}
{{- end -}}

{{/* sha256 of a live Secret key's value; "" when it cannot be read (helm template renders no cluster state). */}}
{{- define "grs.liveChecksum" -}}
{{- $live := lookup "v1" "Secret" .root.Release.Namespace .name -}}
{{- if and $live $live.data (hasKey $live.data .key) -}}
{{- index $live.data .key | sha256sum | trunc 16 -}}
{{- end -}}
{{- end -}}

{{/* What every Pod of the chart carries besides its own: podLabels / podAnnotations, global and per component. */}}
{{- define "grs.podMeta" -}}
labels:
  {{- include "grs.labels" .root | nindent 2 }}
  app.kubernetes.io/component: {{ .component }}
  {{- with merge (deepCopy (.values.podLabels | default dict)) (.root.Values.podLabels | default dict) }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with merge (deepCopy (.values.podAnnotations | default dict)) (.root.Values.podAnnotations | default dict) (.annotations | default dict) }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Scheduling of one component: priority class, node selector, tolerations, affinity, spread. */}}
{{- define "grs.scheduling" -}}
{{- with .values.priorityClassName | default .root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
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
  value: {{ .Values.logFormat | quote }}
{{- with .Values.giteaInstances }}
- name: GRS_GITEA_INSTANCES
  value: {{ $pairs := list }}{{ range $name, $url := . }}{{ $pairs = append $pairs (printf "%s=%s" $name $url) }}{{ end }}{{ join "," $pairs | quote }}
{{- end }}
{{- end -}}

{{- define "grs.podSecurity" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Pod annotations that roll a workload when a Secret it reads is rotated and `helm upgrade` runs.
     Only for Secrets you manage (existingSecret): the generated ones are created once and kept, and a
     checksum of a Secret that does not exist yet (first install) would roll everything on the next upgrade. */}}
{{- define "grs.redisChecksum" -}}
{{- $existing := ternary .Values.redis.auth.existingSecret .Values.redis.external.existingSecret .Values.redis.enabled -}}
{{- if $existing -}}
checksum/redis-password: {{ include "grs.liveChecksum" (dict "root" . "name" $existing "key" (include "grs.redisSecretKey" .)) | quote }}
{{- end -}}
{{- end -}}

{{- define "grs.webhookChecksum" -}}
{{- with .Values.webhook.secret.existingSecret -}}
checksum/webhook-secret: {{ include "grs.liveChecksum" (dict "root" $ "name" . "key" $.Values.webhook.secret.key) | quote }}
{{- end -}}
{{- end -}}

{{/* The install's own Secrets, namespace/name, comma-separated: no RunnerGroup may use them. */}}
{{- define "grs.protectedSecrets" -}}
{{- $ns := .Release.Namespace -}}
{{- $out := list (printf "%s/%s" $ns (include "grs.webhookSecretName" .)) -}}
{{- with include "grs.redisSecretName" . }}{{ $out = append $out (printf "%s/%s" $ns .) }}{{ end -}}
{{- if .Values.cache.enabled }}{{ $out = append $out (printf "%s/%s" $ns (include "grs.cacheSecretName" .)) }}{{ end -}}
{{- join "," $out -}}
{{- end -}}

{{- define "grs.cacheChecksum" -}}
{{- if .Values.cache.enabled -}}
{{- with .Values.cache.secret.existingSecret -}}
checksum/cache-secret: {{ include "grs.liveChecksum" (dict "root" $ "name" . "key" $.Values.cache.secret.key) | quote }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "grs.reconcilerServiceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (printf "%s-reconciler" (include "grs.fullname" .)) -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces whose RunnerGroups the reconciler serves (their runners run there), as a JSON list:
runnerNamespaces, or the release namespace. */}}
{{- define "grs.runnerNamespaces" -}}
{{- .Values.runnerNamespaces | default (list .Release.Namespace) | uniq | toJson -}}
{{- end }}

{{/* The reconciler's rules over RunnerGroups, runner Jobs, their Pods and Events. */}}
{{- define "grs.reconcilerRules" -}}
- apiGroups: [gitea.bpg.pw]
  resources: [runnergroups]
  verbs: [get, list, watch, patch]
- apiGroups: [gitea.bpg.pw]
  resources: [runnergroups/status]
  verbs: [get, patch]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch, list]
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: [create]
{{- end }}

{{/* Where Gitea delivers the webhooks the controller installs (webhook.manage). */}}
{{- define "grs.webhookManageURL" -}}
{{- $manage := .Values.webhook.manage -}}
{{- if $manage.url -}}
{{- $manage.url -}}
{{- else if .Values.webhook.ingress.enabled -}}
{{- printf "%s://%s%s" (ternary "https" "http" (gt (len .Values.webhook.ingress.tls) 0)) .Values.webhook.ingress.host .Values.webhook.path -}}
{{- else -}}
{{- fail "webhook.manage.enabled needs webhook.manage.url (the receiver as Gitea reaches it), or webhook.ingress.enabled" -}}
{{- end -}}
{{- end -}}
