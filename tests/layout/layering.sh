#!/usr/bin/env bash
# The link graph keeps the layering of docs/design-notes.md: no library of
# the build calls a function of a layer above it (or beside it). For every
# static library, each undefined symbol that another kbrun library defines
# must come from a layer this one may use. And every symbol a layer exports
# carries the kb_ prefix (luaopen_kb_* too: the name Lua prescribes for the
# opener of module kb.*), but for kb_k8s_pb, which protoc-c generates from
# the Kubernetes .proto files. Usage: layering.sh BUILD_DIR
set -euo pipefail
build="${1:?usage: layering.sh BUILD_DIR}"

# layer: the layers it may use directly (the closure is taken below).
declare -A uses=(
  [k8s_pb]=""            [codec]="k8s_pb"       [stats]=""
  [base]="codec"         [net]="base codec"
  [sim_model]="net base codec stats"
  [sim_kfp]="sim_model"  [sim_k8s]="sim_model"
  [sim_argo]="sim_k8s"   [sim_ctl]="sim_k8s sim_kfp"
  [sim]="sim_argo sim_ctl"
  [db]="base codec"
  [rt]="base"            [lua]="rt sim net codec stats db"
)

closure() { # the layers $1 may use, transitively
  local todo=($1) seen=" " l
  while ((${#todo[@]})); do
    l=${todo[0]}; todo=("${todo[@]:1}")
    [[ $seen == *" $l "* ]] && continue
    seen+="$l "
    todo+=(${uses[$l]})
  done
  echo "$seen"
}

defs=$(mktemp); trap 'rm -f "$defs"' EXIT
for l in "${!uses[@]}"; do
  a="$build/libkb_$l.a"
  [[ -f $a ]] || { echo "layering: $a is missing (a layer was renamed? update tests/layout/layering.sh)"; exit 1; }
  # __odr_asan.* and __sancov_* are the sanitizers' own symbols, not ours
  nm -g --defined-only "$a" 2>/dev/null |
    awk -v l="$l" 'NF==3 && $3 !~ /^__(odr_asan|asan|ubsan|sancov)/ {print $3, l}' >> "$defs"
done
for a in "$build"/libkb_*.a; do
  l=$(basename "$a" .a); l=${l#libkb_}
  [[ -n ${uses[$l]+x} ]] || { echo "layering: $a is not in the layer table of tests/layout/layering.sh"; exit 1; }
done

bad=0
unprefixed=$(awk '$2 != "k8s_pb" && $1 !~ /^(kb_|luaopen_kb_)/ {print "  " $2 ": " $1}' "$defs")
if [[ -n $unprefixed ]]; then
  echo "layering: exported symbols without the kb_ prefix:"
  echo "$unprefixed"
  bad=1
fi
for l in "${!uses[@]}"; do
  allowed=$(closure "$l")
  while read -r obj sym owner; do
    if [[ $allowed != *" $owner "* ]]; then
      echo "layering: ${obj} (layer $l) calls $sym of layer $owner, which $l may not use"
      bad=1
    fi
  done < <(nm -A -u "$build/libkb_$l.a" 2>/dev/null | awk '{print $1, $NF}' |
           sort -k2 | join -1 2 -2 1 -o 1.1,1.2,2.2 - <(sort -k1,1 "$defs"))
done
n=$(wc -l < "$defs")
((bad)) && exit 1
echo "layering: ${#uses[@]} layers, $n exported symbols, all kb_, no call goes upwards"
