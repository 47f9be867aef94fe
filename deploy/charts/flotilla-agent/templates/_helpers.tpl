{{/* Labels of every object, as the kustomize base's plus Helm's. */}}
{{- define "flotilla-agent.labels" -}}
app.kubernetes.io/part-of: flotilla
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "flotilla-agent.agentLabels" -}}
app.kubernetes.io/name: flotilla-agent
app.kubernetes.io/component: agent
{{ include "flotilla-agent.labels" . }}
{{- end }}

{{- define "flotilla-agent.selector" -}}
app.kubernetes.io/name: flotilla-agent
{{- end }}

{{- define "flotilla-agent.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* checks fails the render on values the schema cannot express. */}}
{{- define "flotilla-agent.checks" -}}
{{- if and (eq .Values.certificates.mode "provided") (not .Values.hubAddress) -}}
{{- fail "hubAddress: must be set when certificates.mode is provided (the hub's sync endpoint host:port)" -}}
{{- end -}}
{{- if and (eq .Values.certificates.mode "provided") .Values.certificates.join.token -}}
{{- fail "certificates.join.token: only with certificates.mode join" -}}
{{- end -}}
{{- if and .Values.certificates.join.token (not .Values.certificates.join.caHash) -}}
{{- fail "certificates.join.caHash: must be set with certificates.join.token (sha256:<hex> of the hub CA)" -}}
{{- end -}}
{{- if and .Values.certificates.join.token (not .Values.hubAddress) -}}
{{- fail "hubAddress: must be set with certificates.join.token (the bootstrap Secret carries it)" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled: needs metrics.enabled" -}}
{{- end -}}
{{- end }}

{{/* Renders the generated RBAC file (make manifests copies
deploy/agent/rbac/role.yaml into files/): its objects with the chart's
labels, namespaced ones in the release namespace. */}}
{{- define "flotilla.generatedRBAC" -}}
{{- $root := index . 0 -}}
{{- $labels := index . 1 -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" ($root.Files.Get "files/role.yaml") -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj }}
{{- $_ := set $obj.metadata "labels" $labels }}
{{- if eq $obj.kind "Role" }}
{{- $_ := set $obj.metadata "namespace" $root.Release.Namespace }}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}
