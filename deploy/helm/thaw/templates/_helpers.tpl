{{/* Names: <release> when it already says thaw, else <release>-thaw; at most 53 characters. */}}
{{- define "thaw.fullname" -}}
{{- if contains "thaw" .Release.Name -}}
{{- .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-thaw" .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The warm pool of the class `default` keeps its historical name (<fullname>-pool: the
  activator's --pool-deployment); every other class is <fullname>-pool-<class>. */}}
{{- define "thaw.pool" -}}{{ include "thaw.fullname" . }}-pool{{- end -}}
{{- define "thaw.poolName" -}}
{{- if eq .class "default" -}}
{{- include "thaw.pool" .root -}}
{{- else -}}
{{- printf "%s-pool-%s" (include "thaw.fullname" .root) .class -}}
{{- end -}}
{{- end -}}
{{- define "thaw.lease" -}}{{ include "thaw.fullname" . }}-leader{{- end -}}
{{- /* The Secret of the deployment's token (values: internalCalls; thawwire.internal_calls). */ -}}
{{- define "thaw.internalSecret" -}}
{{- .Values.internalCalls.existingSecret | default (printf "%s-internal" (include "thaw.fullname" .)) -}}
{{- end -}}
{{- /* Its flags and volume, the same in the activators and the runtime pods. */ -}}
{{- define "thaw.internalArgs" -}}
- --internal-token-file=/etc/thaw-internal/token
- --max-internal-body-bytes={{ int64 .Values.internalCalls.maxBodyBytes }}
{{- end -}}
{{- define "thaw.internalMount" -}}
- {name: internal-token, mountPath: /etc/thaw-internal, readOnly: true}
{{- end -}}
{{- define "thaw.internalVolume" -}}
- name: internal-token  # group-readable: the pods' fsGroup
  secret: {secretName: {{ include "thaw.internalSecret" . }}, defaultMode: 0440, items: [{key: token, path: token}]}
{{- end -}}
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

{{/* An image reference from {registry, repository, tag, digest}: the digest wins over the tag. */}}
{{- define "thaw.imageRef" -}}
{{- $repo := .repository -}}
{{- if .registry -}}{{- $repo = printf "%s/%s" (trimSuffix "/" .registry) .repository -}}{{- end -}}
{{- if .digest -}}
{{- printf "%s@%s" $repo .digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (toString .tag) -}}
{{- end -}}
{{- end -}}

{{- define "thaw.image" -}}{{ include "thaw.imageRef" .Values.image }}{{- end -}}

{{/* The image values of a pool (dict "root" . "pool" $pool): the CUDA image when it has GPUs. */}}
{{- define "thaw.poolImageValues" -}}
{{- if gt (int (.pool.gpu | default 0)) 0 -}}{{ toJson .root.Values.imageGpu }}{{- else -}}{{ toJson .root.Values.image }}{{- end -}}
{{- end -}}

{{/* imagePullSecrets of a pod from a list of image-values dicts. */}}
{{- define "thaw.pullSecrets" -}}
{{- $names := list -}}
{{- range . -}}{{- range (.pullSecrets | default list) -}}{{- $names = append $names . -}}{{- end -}}{{- end -}}
{{- with (uniq $names) }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "thaw.metricsAnnotations" -}}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end }}
{{- end -}}

{{/* Is the activator Service reachable from outside the cluster? */}}
{{- define "thaw.exposed" -}}
{{- if or .Values.ingress.enabled (ne .Values.activator.service.type "ClusterIP") -}}true{{- end -}}
{{- end -}}

{{/* Fail early, in words, on values the platform cannot run with. */}}
{{- define "thaw.validate" -}}
{{- $source := .Values.modelRepository.source -}}
{{- $missing := list -}}
{{- if not $source -}}
{{- $missing = append $missing "modelRepository.source (pvc with modelRepository.pvcName, s3 with modelRepository.s3Uri, or configMap with modelRepository.configMapName: a ConfigMap you create)" -}}
{{- end -}}
{{- if and .Values.nodeCache.prefetch.enabled (not .Values.images.storeUri) -}}
{{- $missing = append $missing "images.storeUri (s3://bucket/prefix of the snapshot images; the prefetch DaemonSet has nothing to fetch without it), or nodeCache.prefetch.enabled=false" -}}
{{- end -}}
{{- with $missing -}}
{{- fail (printf "Thaw needs values it has no default for; set %s. See docs/kubernetes.md, \"Install\"." (join "; and " .)) -}}
{{- end -}}
{{- if not (has $source (list "configMap" "pvc" "s3")) -}}
{{- fail (printf "modelRepository.source = %q, must be one of configMap, pvc, s3" $source) -}}
{{- end -}}
{{- if and (eq $source "pvc") (not .Values.modelRepository.pvcName) -}}
{{- fail "modelRepository.source = pvc needs modelRepository.pvcName" -}}
{{- end -}}
{{- if and (eq $source "configMap") (not .Values.modelRepository.configMapName) -}}
{{- fail "modelRepository.source = configMap needs modelRepository.configMapName: the chart does not create that ConfigMap (kubectl create configmap NAME --from-file=...; one key per file, 1 MiB in all); for a real repository use pvc or s3" -}}
{{- end -}}
{{- if and (eq $source "s3") (not (regexMatch "^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$" .Values.modelRepository.s3Uri)) -}}
{{- fail (printf "modelRepository.s3Uri = %q, must be s3://bucket/prefix (an S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit)" .Values.modelRepository.s3Uri) -}}
{{- end -}}
{{- if and .Values.images.storeUri (not (regexMatch "^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$|^/" .Values.images.storeUri)) -}}
{{- fail (printf "images.storeUri = %q, must be s3://bucket/prefix (an S3 bucket name: 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit) or an absolute path on the node" .Values.images.storeUri) -}}
{{- end -}}
{{- range $key, $img := dict "image" .Values.image "imageGpu" .Values.imageGpu "modelRepository.s3Sync.image" .Values.modelRepository.s3Sync.image -}}
{{- if and $img.digest (not (regexMatch "^sha256:[0-9a-f]{64}$" $img.digest)) -}}
{{- fail (printf "%s.digest = %q, must be sha256:<64 hex digits>" $key $img.digest) -}}
{{- end -}}
{{- if and (not $img.digest) (not (regexMatch "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$" (toString $img.tag))) -}}
{{- fail (printf "%s.tag = %q, must be an image tag (or set %s.digest)" $key (toString $img.tag) $key) -}}
{{- end -}}
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
{{- include "thaw.validatePools" . -}}
{{- include "thaw.validateModels" . -}}
{{- include "thaw.validateExposure" . -}}
{{- end -}}

{{- define "thaw.validatePools" -}}
{{- $pools := .Values.runtime.pools | default dict -}}
{{- if not (hasKey $pools "default") -}}
{{- fail "runtime.pools must have a class named `default` (the activator's --pool-deployment; models without placementClass go there)" -}}
{{- end -}}
{{- range $class, $pool := $pools -}}
{{- if not (regexMatch "^[a-z0-9]([a-z0-9-]{0,22}[a-z0-9])?$" $class) -}}
{{- fail (printf "runtime.pools: %q is not a class name (1-24 characters of [a-z0-9-], starting and ending alphanumeric)" $class) -}}
{{- end -}}
{{- $gpu := int ($pool.gpu | default 0) -}}
{{- if or (lt $gpu 0) (gt $gpu 8) -}}
{{- fail (printf "runtime.pools.%s.gpu = %v, must be an integer in [0, 8]" $class $pool.gpu) -}}
{{- end -}}
{{- if lt (int ($pool.replicas | default 0)) 0 -}}
{{- fail (printf "runtime.pools.%s.replicas = %v, must be >= 0" $class $pool.replicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "thaw.validateModels" -}}
{{- $pools := .Values.runtime.pools | default dict -}}
{{- range $i, $m := .Values.models -}}
{{- $name := toString $m.name -}}
{{- if not (regexMatch "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$" $name) -}}
{{- fail (printf "models: %q is not a model name ([A-Za-z0-9_][A-Za-z0-9_.-]*, at most 128)" $name) -}}
{{- end -}}
{{- if $m.imageUri -}}
{{- fail (printf "models[%d] (%s): imageUri is not supported: every model's image comes from images.storeUri (thaw serve --store); remove it" $i $name) -}}
{{- end -}}
{{- if $m.instanceType -}}
{{- fail (printf "models[%d] (%s): instanceType is not a chart value: pin an instance type with a placement class (runtime.pools.NAME.nodeSelector node.kubernetes.io/instance-type) and set the model's placementClass to NAME" $i $name) -}}
{{- end -}}
{{- $class := toString ($m.placementClass | default "default") -}}
{{- if not (hasKey $pools $class) -}}
{{- fail (printf "models[%d] (%s): placementClass = %q, must be one of runtime.pools: %s" $i $name $class (join ", " (keys $pools | sortAlpha))) -}}
{{- end -}}
{{- $want := int ($m.gpu | default 0) -}}
{{- $has := int ((get $pools $class).gpu | default 0) -}}
{{- if and (eq $want 0) (gt $has 0) -}}
{{- fail (printf "models[%d] (%s): a CPU model (gpu 0) may not use the GPU class %q: give it a class with gpu 0" $i $name $class) -}}
{{- end -}}
{{- if gt $want $has -}}
{{- fail (printf "models[%d] (%s): gpu = %d, but its class %q has %d GPUs per pod: use a class with gpu >= %d" $i $name $want $class $has $want) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Never reachable from outside the cluster without the API key, never over plain HTTP. */}}
{{- define "thaw.validateExposure" -}}
{{- if and .Values.auth.enabled (not .Values.auth.existingSecret) -}}
{{- fail "auth.enabled needs auth.existingSecret: a Secret holding the API key (kubectl -n NAMESPACE create secret generic thaw-api-key --from-literal=api-key=...)" -}}
{{- end -}}
{{- if and .Values.auth.enabled (not (regexMatch "^[A-Za-z0-9-]+$" .Values.auth.header)) -}}
{{- fail (printf "auth.header = %q, must be an HTTP header name ([A-Za-z0-9-])" .Values.auth.header) -}}
{{- end -}}
{{- if and (include "thaw.exposed" .) (not .Values.auth.enabled) -}}
{{- fail (printf "refusing to expose the activators outside the cluster (ingress.enabled = %v, activator.service.type = %s) without authentication: set auth.enabled=true and auth.existingSecret" .Values.ingress.enabled .Values.activator.service.type) -}}
{{- end -}}
{{- if and .Values.ingress.enabled (or (not .Values.ingress.host) (not .Values.ingress.tlsSecretName)) -}}
{{- fail "ingress.enabled needs ingress.host and ingress.tlsSecretName: the Ingress serves TLS only" -}}
{{- end -}}
{{- end -}}

{{/* Restricted-API flags (`thaw up`, as `thaw serve` and Triton spell them); the key comes from
  the Secret through $(THAW_API_KEY), so it never appears in the pod spec. */}}
{{- define "thaw.authArgs" -}}
{{- if .Values.auth.enabled }}
{{- $spec := printf "%s:%s=$(THAW_API_KEY)" (join "," .Values.auth.apis) .Values.auth.header }}
- --http-restricted-api={{ $spec }}
- --grpc-restricted-protocol={{ $spec }}
{{- end }}
{{- end -}}

{{/* The model repository volume: a read-only ConfigMap or PVC, or for s3 a size-bounded emptyDir
  that the `repository` init container fills. */}}
{{- define "thaw.repositoryVolume" -}}
- name: models
{{- if eq .Values.modelRepository.source "configMap" }}
  configMap:
    name: {{ .Values.modelRepository.configMapName }}
    {{- with .Values.modelRepository.configMapItems }}
    items:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- else if eq .Values.modelRepository.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ .Values.modelRepository.pvcName }}
    readOnly: true
{{- else }}
  emptyDir: {sizeLimit: {{ .Values.modelRepository.s3Sync.sizeLimit }}}
{{- end }}
{{- end -}}

{{/* The s3 repository's copy, as one init-container list item (or nothing), bounded in size
  (the emptyDir's sizeLimit: a larger repository evicts the pod, saying so) and in time. The
  activators take the whole tree too: they read version directories (arena sizing, versions). */}}
{{- define "thaw.repositorySyncContainer" -}}
{{- $v := .root.Values -}}
{{- if eq $v.modelRepository.source "s3" }}
- name: repository
  image: {{ include "thaw.imageRef" $v.modelRepository.s3Sync.image }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  command:
    - timeout
    - {{ printf "%ds" (int $v.modelRepository.s3Sync.timeoutSeconds) | quote }}
    - aws
    - s3
    - sync
    - --only-show-errors
    - {{ $v.modelRepository.s3Uri | quote }}
    - {{ $v.modelRepository.mountPath | quote }}
  {{- with $v.images.region }}
  env:
    - {name: AWS_REGION, value: {{ . | quote }}}
  {{- end }}
  securityContext:
    {{- include "thaw.containerSecurity" . | nindent 4 }}
  volumeMounts:
    - {name: models, mountPath: {{ $v.modelRepository.mountPath }}}
    - {name: tmp, mountPath: /tmp}
  resources:
    requests: {cpu: 100m, memory: 128Mi}
    limits: {memory: 512Mi}
{{- end }}
{{- end -}}

{{/* The init containers of runtime pods (warm pools) and of the prefetcher: the one place to add
  one (each item a list entry at this indentation). */}}
{{- define "thaw.runtimeInitContainers" -}}
{{- include "thaw.cacheOwner" . }}
{{- include "thaw.repositorySyncContainer" (dict "root" .root) -}}
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
