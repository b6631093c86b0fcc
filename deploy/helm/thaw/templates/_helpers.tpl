{{/* Names: <release> when it already says thaw, else <release>-thaw; at most 53 characters. */}}
{{- define "thaw.fullname" -}}
{{- if contains "thaw" .Release.Name -}}
{{- .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-thaw" .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "thaw.pool" -}}{{ include "thaw.fullname" . }}-pool{{- end -}}
{{- define "thaw.lease" -}}{{ include "thaw.fullname" . }}-leader{{- end -}}
{{- define "thaw.modelsConfigMap" -}}{{ include "thaw.fullname" . }}-models{{- end -}}

{{- define "thaw.labels" -}}
app.kubernetes.io/name: thaw
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: thaw
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The activator pods' selector (Deployment, Service, PDB, NetworkPolicy peers). */}}
{{- define "thaw.activatorSelector" -}}
app.kubernetes.io/name: thaw
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: activator
{{- end -}}

{{/* Every runtime pod, pooled or claimed (claims remove only thaw.dev/pool). */}}
{{- define "thaw.runtimeSelector" -}}
thaw.dev/runtime: {{ include "thaw.fullname" . }}
{{- end -}}

{{- define "thaw.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}

{{/* The runtime's image: the CUDA variant when the pool has GPUs. */}}
{{- define "thaw.runtimeImage" -}}
{{- if .Values.runtime.gpu.enabled -}}
{{- printf "%s:%s" .Values.imageGpu.repository .Values.imageGpu.tag -}}
{{- else -}}
{{- include "thaw.image" . -}}
{{- end -}}
{{- end -}}

{{- define "thaw.metricsAnnotations" -}}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* Fail early, in words, on values the platform cannot run with. */}}
{{- define "thaw.validate" -}}
{{- $source := .Values.modelRepository.source -}}
{{- if not (has $source (list "configMap" "pvc" "s3")) -}}
{{- fail (printf "modelRepository.source = %q, must be one of configMap, pvc, s3" $source) -}}
{{- end -}}
{{- if and (eq $source "pvc") (not .Values.modelRepository.pvcName) -}}
{{- fail "modelRepository.source = pvc needs modelRepository.pvcName" -}}
{{- end -}}
{{- if and (eq $source "s3") (not (regexMatch "^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$" .Values.modelRepository.s3Uri)) -}}
{{- fail (printf "modelRepository.s3Uri = %q, must be s3://bucket/prefix" .Values.modelRepository.s3Uri) -}}
{{- end -}}
{{- if lt (int .Values.activator.replicas) 2 -}}
{{- fail (printf "activator.replicas = %v, must be >= 2 (active-active)" .Values.activator.replicas) -}}
{{- end -}}
{{- $lease := int .Values.activator.leaseDurationSeconds -}}
{{- if or (lt $lease 1) (gt $lease 3600) -}}
{{- fail (printf "activator.leaseDurationSeconds = %v, must be in [1, 3600]" .Values.activator.leaseDurationSeconds) -}}
{{- end -}}
{{- $ports := list (int .Values.runtime.port) (int .Values.runtime.grpcPort) (int .Values.runtime.metricsPort) -}}
{{- range $ports -}}
{{- if or (lt . 1) (gt . 65535) -}}
{{- fail (printf "runtime ports (port, grpcPort, metricsPort) = %v, each must be in [1, 65535]" $ports) -}}
{{- end -}}
{{- end -}}
{{- if ne (len (uniq $ports)) 3 -}}
{{- fail (printf "runtime ports (port, grpcPort, metricsPort) = %v, must be three different ports" $ports) -}}
{{- end -}}
{{- range .Values.models -}}
{{- if not (regexMatch "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$" (toString .name)) -}}
{{- fail (printf "models: %q is not a model name ([A-Za-z0-9_][A-Za-z0-9_.-]*, at most 128)" (toString .name)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The model repository volume (and, for s3, the init container that fills it). */}}
{{- define "thaw.repositoryVolume" -}}
- name: models
{{- if eq .Values.modelRepository.source "configMap" }}
  configMap:  # default name: <release>-repository (kubectl create configmap ... --from-file)
    name: {{ .Values.modelRepository.configMapName | default (printf "%s-repository" (include "thaw.fullname" .)) }}
    {{- with .Values.modelRepository.configMapItems }}
    items:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- else if eq .Values.modelRepository.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ .Values.modelRepository.pvcName }}
    readOnly: true
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{- define "thaw.repositorySync" -}}
{{- if eq .Values.modelRepository.source "s3" }}
initContainers:
  - name: repository
    image: {{ printf "%s:%s" .Values.modelRepository.s3SyncImage.repository .Values.modelRepository.s3SyncImage.tag }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["aws", "s3", "sync", "--only-show-errors", {{ .Values.modelRepository.s3Uri | quote }}, {{ .Values.modelRepository.mountPath | quote }}]
    {{- with .Values.images.region }}
    env:
      - {name: AWS_REGION, value: {{ . | quote }}}
    {{- end }}
    securityContext:
      {{- include "thaw.containerSecurity" . | nindent 6 }}
    volumeMounts:
      - {name: models, mountPath: {{ .Values.modelRepository.mountPath }}}
      - {name: tmp, mountPath: /tmp}
    resources:
      requests: {cpu: 100m, memory: 128Mi}
      limits: {memory: 512Mi}
{{- end }}
{{- end -}}

{{- define "thaw.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end -}}

{{- define "thaw.regionEnv" -}}
{{- with .Values.images.region }}
- {name: AWS_REGION, value: {{ . | quote }}}
{{- end }}
{{- end -}}
