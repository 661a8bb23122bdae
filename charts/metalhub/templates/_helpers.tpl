{{/* Prefix of every object's name: fullnameOverride, else the release name. */}}
{{- define "metalhub.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of an object; call with (list $ "component"). */}}
{{- define "metalhub.labels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: metalhub
app.kubernetes.io/component: {{ index . 1 }}
app.kubernetes.io/managed-by: {{ $root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" $root.Chart.Name $root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The pods' selector. */}}
{{- define "metalhub.selectorLabels" -}}
app.kubernetes.io/name: metalhub
app.kubernetes.io/component: controller-manager
{{- end -}}

{{- define "metalhub.serviceAccountName" -}}
{{ include "metalhub.fullname" . }}-controller-manager
{{- end -}}

{{- define "metalhub.metal" -}}
{{- if has "metal" .Values.controllers }}true{{ end -}}
{{- end -}}

{{- define "metalhub.delivery" -}}
{{- if has "delivery" .Values.controllers }}true{{ end -}}
{{- end -}}

{{- define "metalhub.registry" -}}
{{- if and (include "metalhub.metal" .) .Values.metal.registry.enabled }}true{{ end -}}
{{- end -}}

{{/* The ServiceAccount the chart creates for delivery to apply as (delivery.serviceAccount). */}}
{{- define "metalhub.deliveryServiceAccountName" -}}
{{ include "metalhub.fullname" . }}-delivery
{{- end -}}

{{/* --delivery-default-service-account: the value given, else the chart's delivery ServiceAccount. */}}
{{- define "metalhub.defaultServiceAccount" -}}
{{- if .Values.delivery.defaultServiceAccount -}}
{{ .Values.delivery.defaultServiceAccount }}
{{- else if .Values.delivery.serviceAccount.create -}}
{{ .Release.Namespace }}/{{ include "metalhub.deliveryServiceAccountName" . }}
{{- end -}}
{{- end -}}
