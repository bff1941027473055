#!/usr/bin/env bash
# Derives gojson.txt, the facts of the Kubernetes JSON mapping that the
# .proto files do not carry, from the Go types the .proto files were
# generated from (the types.go files at the commits of SOURCES.md):
#   inline     the field's struct is embedded with `json:",inline"`: its
#              fields appear in the parent's JSON object
#   omitempty  a non-pointer field tagged omitempty: Go's JSON drops its zero
#              value ("", 0, false), which the protobuf marshaller still writes
#   slice      a message wrapping a named Go slice type ('type Verbs []string'): its
#              JSON is the array of its items
# Usage: derive-gojson.sh API_GIT_DIR API_COMMIT MACHINERY_GIT_DIR MACHINERY_COMMIT > gojson.txt
set -euo pipefail
api=$1 apic=$2 mach=$3 machc=$4
facts() { # git-dir commit file proto-package
  git --git-dir="$1" show "$2:$3" | awk -v pkg="$4" '
    /^type [A-Za-z0-9]+ struct/ { t = $2; next }
    /^type [A-Za-z0-9]+ \[\][A-Za-z0-9.]+$/ { print pkg "." $2 " slice"; next }
    /^}/ { t = ""; next }
    t != "" && /protobuf:"/ {
      embedded = ($2 ~ /^`/)
      if (match($0, /name=[A-Za-z0-9]+/)) name = substr($0, RSTART + 5, RLENGTH - 5)
      else if (embedded) { name = $1; sub(/.*\./, "", name); name = tolower(substr(name, 1, 1)) substr(name, 2) }
      else next
      if (!match($0, /json:"[^"]*"/)) next
      tag = substr($0, RSTART + 6, RLENGTH - 7)
      if (tag ~ /,inline/) print pkg "." t "." name " inline"
      else if (!embedded && tag ~ /,omitempty/ && $2 !~ /^\*/) print pkg "." t "." name " omitempty"
    }'
}
{
  for g in core/v1 batch/v1 apps/v1 policy/v1 coordination/v1 discovery/v1 storage/v1 \
           scheduling/v1 authorization/v1 authentication/v1; do
    facts "$api" "$apic" "$g/types.go" "k8s.io.api.${g/\//.}"
  done
  facts "$mach" "$machc" pkg/apis/meta/v1/types.go k8s.io.apimachinery.pkg.apis.meta.v1
  facts "$mach" "$machc" pkg/runtime/types.go k8s.io.apimachinery.pkg.runtime
  facts "$mach" "$machc" pkg/runtime/types_proto.go k8s.io.apimachinery.pkg.runtime 2>/dev/null || true
} | LC_ALL=C sort -u
