{{/* Labels of every object, as the kustomize base's plus Helm's. */}}
{{- define "flotilla-hub.labels" -}}
app.kubernetes.io/part-of: flotilla
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of the hub's own objects (Deployment, Services, PDB). */}}
{{- define "flotilla-hub.hubLabels" -}}
app.kubernetes.io/name: flotilla-hub
app.kubernetes.io/component: hub
{{ include "flotilla-hub.labels" . }}
{{- end }}

{{- define "flotilla-hub.selector" -}}
app.kubernetes.io/name: flotilla-hub
{{- end }}

{{- define "flotilla-hub.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The Services' names the hub's certificate must be valid for. */}}
{{- define "flotilla-hub.serviceHosts" -}}
{{- $ns := .Release.Namespace -}}
- flotilla-hub-webhook.{{ $ns }}.svc
- flotilla-hub.{{ $ns }}.svc
- flotilla-hub-headless.{{ $ns }}.svc
{{- end }}

{{/* checks fails the render on values the schema cannot express. */}}
{{- define "flotilla-hub.checks" -}}
{{- if and (ne .Values.certificates.mode "self-managed") (not .Values.certificates.secretName) -}}
{{- fail "certificates.secretName: must be set when certificates.mode is cert-manager or provided" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled: needs metrics.enabled" -}}
{{- end -}}
{{- end }}

{{/* rbac renders a generated RBAC file (make manifests copies
deploy/<base>/rbac/role.yaml into files/): its objects with the chart's
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
