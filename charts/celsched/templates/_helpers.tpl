{{/* Labels Helm adds to every object, beside those of config/. */}}
{{- define "celsched.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The webhook certificate mode, checked. */}}
{{- define "celsched.certs" -}}
{{- if not (has .Values.webhook.certs (list "self-signed" "cert-manager")) -}}
{{- fail (printf "webhook.certs is %q: want self-signed or cert-manager" .Values.webhook.certs) -}}
{{- end -}}
{{- .Values.webhook.certs -}}
{{- end }}

{{/* The label matcher of this release's manager metrics (monitoring.selector). */}}
{{- define "celsched.metricsSelector" -}}
{{- .Values.monitoring.selector | default (printf "namespace=%q" .Release.Namespace) -}}
{{- end }}
