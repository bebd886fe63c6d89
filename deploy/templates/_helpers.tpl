{{- /*
What the cluster must serve, said before anything renders: every object but the RBAC and the
ServiceAccount is resource.k8s.io/v1 or needs it. `helm template` checks the Kubernetes version
it is given (--kube-version); `helm install` checks the cluster's and what it serves.
*/ -}}
{{- define "media-capabilities.check-cluster" -}}
{{- $version := .Capabilities.KubeVersion.Version -}}
{{- if semverCompare "<1.34.0-0" $version -}}
{{- fail (printf "media-capabilities needs Kubernetes 1.34 or newer, which serves resource.k8s.io/v1 (ResourceSlices, DeviceClasses, ResourceClaimTemplates); this is %s (hint: upgrade the cluster, or render with --kube-version 1.34 or newer)" $version) -}}
{{- end -}}
{{- if not (.Capabilities.APIVersions.Has "resource.k8s.io/v1") -}}
{{- fail (printf "media-capabilities needs resource.k8s.io/v1, which this cluster (%s) does not serve (hint: Kubernetes 1.34 and newer serve it unless the API server's --runtime-config turns it off)" $version) -}}
{{- end -}}
{{- end -}}

{{- /*
"true" when the value KEY of IN is set: present and not null (Helm drops a key whose value is
null; sprig's get would read a missing key as "").
*/ -}}
{{- define "media-capabilities.is-set" -}}
{{- if and (hasKey .in .key) (not (kindIs "invalid" (index .in .key))) -}}true{{- end -}}
{{- end -}}

{{- /*
The agent container's flag FLAG set to VALUE in ARGS (a list of "--flag=value" strings, the
form deploy/base/daemonset.yaml writes): any earlier value of that flag goes, the new one is last.
*/ -}}
{{- define "media-capabilities.set-flag" -}}
{{- $args := list -}}
{{- range .args -}}
{{- if not (hasPrefix (printf "%s=" $.flag) .) -}}
{{- $args = append $args . -}}
{{- end -}}
{{- end -}}
{{- range .values -}}
{{- $args = append $args (printf "%s=%s" $.flag .) -}}
{{- end -}}
{{- toJson $args -}}
{{- end -}}

{{- /*
The values applied to the DaemonSet OBJECT (deploy/base/daemonset.yaml, parsed): each set value
replaces its part of the pod or of the agent container; unset (null) ones leave it as it is.
*/ -}}
{{- define "media-capabilities.daemonset" -}}
{{- $v := .Values -}}
{{- $pod := .object.spec.template.spec -}}
{{- range $key := list "nodeSelector" "tolerations" "affinity" -}}
{{- if include "media-capabilities.is-set" (dict "in" $v "key" $key) -}}
{{- $_ := set $pod $key (index $v $key) -}}
{{- end -}}
{{- end -}}
{{- if include "media-capabilities.is-set" (dict "in" $v "key" "priorityClassName") -}}
{{- if $v.priorityClassName -}}
{{- $_ := set $pod "priorityClassName" $v.priorityClassName -}}
{{- else -}}
{{- $_ := unset $pod "priorityClassName" -}}
{{- end -}}
{{- end -}}
{{- $found := false -}}
{{- range $container := $pod.containers -}}
{{- if eq $container.name "agent" -}}
{{- $found = true -}}
{{- $image := $v.image | default dict -}}
{{- if or $image.repository $image.tag -}}
{{- $repository := regexReplaceAll ":[^:/]*$" $container.image "" -}}
{{- $_ := set $container "image" (printf "%s:%s" ($image.repository | default $repository) ($image.tag | default $.Chart.AppVersion)) -}}
{{- end -}}
{{- if $image.pullPolicy -}}
{{- $_ := set $container "imagePullPolicy" $image.pullPolicy -}}
{{- end -}}
{{- if include "media-capabilities.is-set" (dict "in" $v "key" "resources") -}}
{{- $resources := pick $v.resources "requests" "limits" -}}
{{- with $container.resources.claims -}}
{{- $_ := set $resources "claims" . -}}
{{- end -}}
{{- $_ := set $container "resources" $resources -}}
{{- end -}}
{{- if $v.logLevel -}}
{{- $env := list -}}
{{- range $container.env -}}
{{- if ne .name "RUST_LOG" -}}
{{- $env = append $env . -}}
{{- end -}}
{{- end -}}
{{- $_ := set $container "env" (append $env (dict "name" "RUST_LOG" "value" $v.logLevel)) -}}
{{- end -}}
{{- $probe := $v.probe | default dict -}}
{{- $args := $container.args -}}
{{- range $flag, $key := dict "--probe-timeout" "timeout" "--probe-parallel" "parallel" "--rescan-interval" "rescanInterval" -}}
{{- if include "media-capabilities.is-set" (dict "in" $probe "key" $key) -}}
{{- $args = include "media-capabilities.set-flag" (dict "args" $args "flag" $flag "values" (list (toString (index $probe $key)))) | fromJsonArray -}}
{{- end -}}
{{- end -}}
{{- with $probe.vaDrivers -}}
{{- $overrides := list -}}
{{- range $key := keys . | sortAlpha -}}
{{- $overrides = append $overrides (printf "%s=%s" $key (get $probe.vaDrivers $key)) -}}
{{- end -}}
{{- $args = include "media-capabilities.set-flag" (dict "args" $args "flag" "--va-driver" "values" $overrides) | fromJsonArray -}}
{{- end -}}
{{- $_ := set $container "args" $args -}}
{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail "deploy/base/daemonset.yaml has no container named agent, which the values apply to" -}}
{{- end -}}
{{- end -}}
