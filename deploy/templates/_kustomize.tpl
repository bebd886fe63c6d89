{{- /*
The part of kustomize that deploy/'s kustomizations use, carried out on the chart's own copies
of their files, so that the chart renders what `kubectl kustomize` renders from the same files
(tests/it/helm.rs compares the two for every variant): `resources` (files of objects, and
directories with a kustomization of their own, rendered first), `components` (a Component's
resources), `labels` (pairs, on the objects' metadata only), and `patches` given as a file (an
object merged into the one of the same kind and name: maps merged, lists replaced, as a strategic
merge patch does for lists without a merge key) or as an inline JSON patch on a kind and name
(`add` and `replace`). Anything else fails the render, naming it.

"media-capabilities.kustomize" takes (dict "dir" DIR "Files" .Files) with DIR the directory of a
kustomization.yaml relative to the chart ("" for the chart's own) and gives its objects as a JSON
list.
*/ -}}
{{- define "media-capabilities.kustomize" -}}
{{- $dir := .dir -}}
{{- $files := .Files -}}
{{- $here := include "media-capabilities.path" (dict "dir" $dir "name" "kustomization.yaml") -}}
{{- $k := $files.Get $here | fromYaml -}}
{{- if not $k -}}
{{- fail (printf "%s is not in the chart (hint: .helmignore must not leave it out)" $here) -}}
{{- end -}}
{{- range $field, $_ := $k -}}
{{- if not (has $field (list "apiVersion" "kind" "labels" "resources" "components" "patches")) -}}
{{- fail (printf "%s: the chart does not carry out %q (hint: teach deploy/templates/_kustomize.tpl to, or the chart and kubectl kustomize would install different objects)" $here $field) -}}
{{- end -}}
{{- end -}}
{{- $objects := list -}}
{{- range $entry := concat ($k.resources | default list) ($k.components | default list) -}}
{{- $path := include "media-capabilities.path" (dict "dir" $dir "name" $entry) -}}
{{- if $files.Get (printf "%s/kustomization.yaml" $path) -}}
{{- $objects = concat $objects (include "media-capabilities.kustomize" (dict "dir" $path "Files" $files) | fromJsonArray) -}}
{{- else -}}
{{- $text := $files.Get $path -}}
{{- if not $text -}}
{{- fail (printf "%s lists %s, which is not in the chart (hint: .helmignore must not leave it out)" $here $path) -}}
{{- end -}}
{{- $objects = concat $objects (include "media-capabilities.documents" (dict "file" $path "text" $text) | fromJsonArray) -}}
{{- end -}}
{{- end -}}
{{- range $k.labels -}}
{{- if or .includeSelectors .includeTemplates -}}
{{- fail (printf "%s: labels with includeSelectors or includeTemplates are not carried out by the chart (hint: teach deploy/templates/_kustomize.tpl to)" $here) -}}
{{- end -}}
{{- $pairs := .pairs -}}
{{- range $objects -}}
{{- $_ := set .metadata "labels" (mergeOverwrite (.metadata.labels | default dict) $pairs) -}}
{{- end -}}
{{- end -}}
{{- range $patch := $k.patches -}}
{{- include "media-capabilities.patch" (dict "patch" $patch "objects" $objects "dir" $dir "Files" $files "here" $here) -}}
{{- end -}}
{{- toJson $objects -}}
{{- end -}}

{{- /* NAME relative to DIR ("" is the chart), cleaned: base/../x is x. */ -}}
{{- define "media-capabilities.path" -}}
{{- if .dir -}}{{- clean (printf "%s/%s" .dir .name) -}}{{- else -}}{{- clean .name -}}{{- end -}}
{{- end -}}

{{- /* The objects of TEXT (the file FILE), YAML documents split at `---`, as a JSON list. */ -}}
{{- define "media-capabilities.documents" -}}
{{- $objects := list -}}
{{- range $document := regexSplit "(?m)^---[ \t]*$" .text -1 -}}
{{- $object := fromYaml $document -}}
{{- if hasKey $object "Error" -}}
{{- fail (printf "%s: %s" $.file $object.Error) -}}
{{- end -}}
{{- if $object -}}
{{- $objects = append $objects $object -}}
{{- end -}}
{{- end -}}
{{- toJson $objects -}}
{{- end -}}

{{- /* One entry of `patches` applied to OBJECTS (changed in place). */ -}}
{{- define "media-capabilities.patch" -}}
{{- $patch := .patch -}}
{{- range $field, $_ := $patch -}}
{{- if not (has $field (list "path" "patch" "target")) -}}
{{- fail (printf "%s: patches[].%s is not carried out by the chart (hint: teach deploy/templates/_kustomize.tpl to)" $.here $field) -}}
{{- end -}}
{{- end -}}
{{- if $patch.path -}}
{{- $file := include "media-capabilities.path" (dict "dir" .dir "name" $patch.path) -}}
{{- range $change := include "media-capabilities.documents" (dict "file" $file "text" ($.Files.Get $file)) | fromJsonArray -}}
{{- $target := include "media-capabilities.find" (dict "objects" $.objects "kind" $change.kind "name" $change.metadata.name "here" $.here) | int -}}
{{- $_ := mergeOverwrite (index $.objects $target) $change -}}
{{- end -}}
{{- else if $patch.target -}}
{{- range $field, $_ := $patch.target -}}
{{- if not (has $field (list "kind" "name")) -}}
{{- fail (printf "%s: a patch target by %s is not carried out by the chart (hint: target a kind and name)" $.here $field) -}}
{{- end -}}
{{- end -}}
{{- $object := index .objects (include "media-capabilities.find" (dict "objects" .objects "kind" $patch.target.kind "name" $patch.target.name "here" .here) | int) -}}
{{- range $op := $patch.patch | fromYamlArray -}}
{{- include "media-capabilities.json-patch" (dict "object" $object "op" $op "here" $.here) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "%s: a patch without path or target" .here) -}}
{{- end -}}
{{- end -}}

{{- /* The index in OBJECTS of the one of KIND and NAME. */ -}}
{{- define "media-capabilities.find" -}}
{{- $found := -1 -}}
{{- range $i, $object := .objects -}}
{{- if and (eq $object.kind $.kind) (eq $object.metadata.name $.name) -}}
{{- $found = $i -}}
{{- end -}}
{{- end -}}
{{- if lt $found 0 -}}
{{- fail (printf "%s: a patch of %s %s, which no resource is" .here .kind .name) -}}
{{- end -}}
{{- $found -}}
{{- end -}}

{{- /*
One JSON patch operation (RFC 6902) OP on OBJECT, changed in place: `add` (a key of a map, or a
position or the end, `-`, of a list) and `replace`.
*/ -}}
{{- define "media-capabilities.json-patch" -}}
{{- $op := .op -}}
{{- if not (has $op.op (list "add" "replace")) -}}
{{- fail (printf "%s: JSON patch op %q is not carried out by the chart (hint: add or replace)" .here $op.op) -}}
{{- end -}}
{{- if contains "~" $op.path -}}
{{- fail (printf "%s: JSON patch path %s has an escape, which the chart does not read" .here $op.path) -}}
{{- end -}}
{{- $segments := rest (splitList "/" $op.path) -}}
{{- $parent := .object -}}
{{- $key := last $segments -}}
{{- $grand := dict -}}
{{- $grandKey := "" -}}
{{- range $segment := initial $segments -}}
{{- $grand = $parent -}}
{{- $grandKey = $segment -}}
{{- if kindIs "slice" $parent -}}
{{- $parent = index $parent (atoi $segment) -}}
{{- else -}}
{{- $parent = index $parent $segment -}}
{{- end -}}
{{- end -}}
{{- if kindIs "map" $parent -}}
{{- $_ := set $parent $key $op.value -}}
{{- else if kindIs "slice" $parent -}}
{{- $list := $parent -}}
{{- if and (eq $op.op "add") (eq $key "-") -}}
{{- $list = append $list $op.value -}}
{{- else if eq $op.op "add" -}}
{{- $at := atoi $key -}}
{{- $list = concat (slice $list 0 $at) (list $op.value) (slice $list $at) -}}
{{- else -}}
{{- $at := atoi $key -}}
{{- $list = concat (slice $list 0 $at) (list $op.value) (slice $list (add1 $at)) -}}
{{- end -}}
{{- if kindIs "slice" $grand -}}
{{- fail (printf "%s: JSON patch path %s: a list in a list is not carried out by the chart" $.here $op.path) -}}
{{- end -}}
{{- $_ := set $grand $grandKey $list -}}
{{- else -}}
{{- fail (printf "%s: JSON patch path %s reaches no map or list" .here $op.path) -}}
{{- end -}}
{{- end -}}
