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
