{{/*
The node cache is a hostPath: the kubelet creates it (DirectoryOrCreate) root-owned 0755, and
fsGroup never applies to hostPath volumes, so the runtime's non-root user could not write it.
This init container, in every pod that mounts the cache, makes it the runtime user's
(uid:gid of podSecurityContext) with group write and setgid (2775) before the pod's own
containers start. It is the only root container of the chart: root with exactly CHOWN, FOWNER
and FSETID (chown, chmod of a directory it does not own, keeping setgid on it), no privilege
escalation, a read-only root, and only the cache mounted. Idempotent (`install -d`), so every
pod on the node may run it; only the cache directory itself changes, never what is in it.
*/}}
{{- define "thaw.cacheOwner" -}}
{{- $v := .root.Values -}}
{{- $image := include "thaw.poolImageValues" (dict "root" .root "pool" .pool) | fromJson -}}
- name: cache-owner
  image: {{ include "thaw.imageRef" $image }}
  imagePullPolicy: {{ $image.pullPolicy }}
  command:
    {{- include "thaw.cacheOwnerCommand" .root | nindent 4 }}
  securityContext:
    runAsUser: 0
    runAsGroup: 0
    runAsNonRoot: false
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities: {drop: [ALL], add: [CHOWN, FOWNER, FSETID]}
  resources:
    requests: {cpu: 10m, memory: 16Mi}
    limits: {memory: 64Mi}
  volumeMounts:
    - {name: cache, mountPath: /var/cache/thaw}
{{- end -}}

{{/* The cache owner's command, as a YAML list (the admission policy pins the root container to
  exactly this command: admission-policy.yaml). */}}
{{- define "thaw.cacheOwnerCommand" -}}
- install
- -d
- -o
- {{ .Values.podSecurityContext.runAsUser | default 10001 | quote }}
- -g
- {{ .Values.podSecurityContext.runAsGroup | default 10001 | quote }}
- -m
- "2775"
- /var/cache/thaw
{{- end -}}
