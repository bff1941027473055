#!/usr/bin/env bash
# The real kubectl's protobuf writes against `kbrun sim`: kubectl 1.32 sends
# application/vnd.kubernetes.protobuf for its typed creates (namespace,
# configmap, secret generic, serviceaccount, job), their --dry-run=server,
# and the pod deletes of `kubectl drain` (DeleteOptions). Each object is
# read back and compared with what was given; media types the simulated
# apiserver does not read are 415, a broken protobuf body a 400. Loopback
# only; every kubectl call runs under `timeout 30`.
set -u
. "$(dirname "$0")/kubectl_common.bash"
kc_init kubectl_proto

kc_start_sim

expect_eq() { [ "$1" = "$2" ] || fail "got '$1', expected '$2'"; }
get() { # get JSONPATH ARGS... : the value kubectl get -o jsonpath prints
  local path=$1
  shift
  timeout 30 kubectl get "$@" -o "jsonpath=$path" 2>"$WORK/get.err"
}

# ---- typed creates, sent as protobuf ---------------------------------------------
begin "create namespace (a protobuf body)"
k create namespace protons -v=8
expect_code "$CODE" 0
expect_in "$WORK/out" "Content-Type: application/vnd.kubernetes.protobuf"
# and the answer too: kubectl lists protobuf first in its Accept
expect_in "$WORK/out" "Response Headers:"
[ "$(grep -c 'Content-Type: application/vnd.kubernetes.protobuf' "$WORK/out")" -ge 2 ] ||
  fail "the answer was not protobuf"
expect_in "$WORK/out" "namespace/protons created"
expect_eq "$(get '{.metadata.name} {.status.phase}' namespace protons)" "protons Active"
end

begin "create configmap --from-literal"
k create configmap settings -n protons --from-literal=greeting='hello world' --from-literal=count=42
expect_code "$CODE" 0
expect_eq "$(get '{.data.greeting}|{.data.count}|{.metadata.namespace}' configmap settings -n protons)" \
  "hello world|42|protons"
end

begin "create secret generic: data is the literal, base64"
k create secret generic creds -n protons --from-literal=password='s3cr3t!ü' --from-literal=user=admin
expect_code "$CODE" 0
timeout 30 kubectl get secret creds -n protons -o json >"$WORK/secret.json" 2>&1
expect_in "$WORK/secret.json" "\"password\": \"$(printf '%s' 's3cr3t!ü' | base64)\""
expect_in "$WORK/secret.json" "\"user\": \"$(printf admin | base64)\""
expect_eq "$(get '{.data.password}' secret creds -n protons | base64 -d)" 's3cr3t!ü'
expect_eq "$(get '{.type}' secret creds -n protons)" "Opaque"
end

begin "create serviceaccount"
k create serviceaccount builder -n protons
expect_code "$CODE" 0
expect_eq "$(get '{.kind} {.metadata.name} {.metadata.namespace}' serviceaccount builder -n protons)" \
  "ServiceAccount builder protons"
end

begin "create job --image, run to completion"
k create job hello -n protons --image=busybox:1.36 -- echo hi there
expect_code "$CODE" 0
expect_eq "$(get '{.spec.template.spec.containers[0].image}|{.spec.template.spec.containers[0].command}|{.spec.template.spec.restartPolicy}' job hello -n protons)" \
  'busybox:1.36|["echo","hi","there"]|Never'
k wait --for=condition=complete job/hello -n protons --timeout=60s
expect_code "$CODE" 0
expect_eq "$(get '{.status.succeeded}' job hello -n protons)" "1"
end

begin "protobuf answers: kubectl reads back what the JSON answer says"
k create secret generic answer -n protons --from-literal=k=v \
  -o jsonpath='{.metadata.uid} {.metadata.resourceVersion} {.metadata.creationTimestamp} {.data.k} {.type}'
expect_code "$CODE" 0
expect_eq "$(cat "$WORK/out")" \
  "$(get '{.metadata.uid} {.metadata.resourceVersion} {.metadata.creationTimestamp} {.data.k} {.type}' secret answer -n protons)"
expect_in "$WORK/out" " dg== Opaque$"
k create job answer -n protons --image=busybox:1.36 \
  -o jsonpath='{.metadata.uid} {.spec.completions} {.spec.backoffLimit} {.spec.template.spec.containers[0].terminationMessagePath} {.spec.selector.matchLabels}' -- true
expect_code "$CODE" 0
expect_eq "$(cat "$WORK/out")" \
  "$(get '{.metadata.uid} {.spec.completions} {.spec.backoffLimit} {.spec.template.spec.containers[0].terminationMessagePath} {.spec.selector.matchLabels}' job answer -n protons)"
expect_in "$WORK/out" " 1 6 /dev/termination-log \\{"
end

begin "--dry-run=server stores nothing"
k create configmap ghost -n protons --from-literal=a=b --dry-run=server -o jsonpath='{.metadata.name}={.data.a}'
expect_code "$CODE" 0
expect_in "$WORK/out" "^ghost=b$"
k get configmap ghost -n protons
expect_in "$WORK/out" 'configmaps "ghost" not found'
k create secret generic ghost -n protons --from-literal=a=b --dry-run=server
expect_code "$CODE" 0
k get secret ghost -n protons
expect_in "$WORK/out" 'secrets "ghost" not found'
end

begin "a duplicate create is the apiserver's AlreadyExists"
k create configmap settings -n protons --from-literal=x=y
[ "$CODE" != 0 ] || fail "a second create succeeded"
expect_in "$WORK/out" 'configmaps "settings" already exists'
expect_eq "$(get '{.data.greeting}' configmap settings -n protons)" "hello world"
end

# ---- drain: the pod deletes carry protobuf DeleteOptions ---------------------------
begin "drain --disable-eviction deletes the job's pod"
POD=$(get '{.items[0].metadata.name}' pods -n protons -l job-name=hello)
NODE=$(get '{.spec.nodeName}' pod "$POD" -n protons)
[ -n "$POD" ] && [ -n "$NODE" ] || fail "no pod/node for job hello"
k drain "$NODE" --force --disable-eviction --ignore-daemonsets --grace-period=5 --timeout=30s -v=8
expect_code "$CODE" 0
expect_in "$WORK/out" "DELETE .*/namespaces/protons/pods/$POD"
expect_in "$WORK/out" "Content-Type: application/vnd.kubernetes.protobuf"
expect_in "$WORK/out" "pod/$POD deleted"
k get pod "$POD" -n protons
expect_in "$WORK/out" "pods \"$POD\" not found"
k uncordon "$NODE"
expect_code "$CODE" 0
end

# ---- DeleteOptions in protobuf, as client-go sends them ----------------------------
# "k8s\0" + Unknown{typeMeta{v1, DeleteOptions}, raw, "", ""}; raw is a
# DeleteOptions: field 4 propagationPolicy, field 5 dryRun
delete_pb() { # delete_pb PATH RAW (printf escapes) : HTTP status, body in $WORK/out
  local raw
  raw=$(printf "$2" | od -An -v -tx1 | tr -d ' \n')
  { printf 'k8s\0\n\023\n\002v1\022\015DeleteOptions\022'
    printf "\\$(printf %o $((${#raw} / 2)))"
    printf "$2"
    printf '\032\000\042\000'; } >"$WORK/del.pb"
  curl -s -o "$WORK/out" -w '%{http_code}' -X DELETE \
    -H "Content-Type: application/vnd.kubernetes.protobuf" --data-binary "@$WORK/del.pb" "$URL$1"
}
owned() { # owned NAME OWNER OWNER-UID : a configmap owned by another
  printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s","namespace":"protons","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"%s","uid":"%s"}]}}' \
    "$1" "$2" "$3" >"$WORK/owned.json"
  k create -f "$WORK/owned.json"
  expect_code "$CODE" 0
}
begin "protobuf DeleteOptions: dryRun keeps the owner, Orphan its dependent, Background not"
k create configmap owner1 -n protons --from-literal=a=1
UID1=$(get '{.metadata.uid}' configmap owner1 -n protons)
owned child1 owner1 "$UID1"
k create configmap owner2 -n protons --from-literal=a=2
owned child2 owner2 "$(get '{.metadata.uid}' configmap owner2 -n protons)"
expect_eq "$(delete_pb /api/v1/namespaces/protons/configmaps/owner1 '\052\003All')" 200
expect_eq "$(get '{.metadata.uid}' configmap owner1 -n protons)" "$UID1"
expect_eq "$(delete_pb /api/v1/namespaces/protons/configmaps/owner1 '\042\006Orphan')" 200
k get configmap owner1 -n protons
expect_in "$WORK/out" 'configmaps "owner1" not found'
expect_eq "$(get '{.metadata.name}' configmap child1 -n protons)" "child1"
expect_eq "$(delete_pb /api/v1/namespaces/protons/configmaps/owner2 '\042\012Background')" 200
gone=0
for _ in $(seq 1 50); do # the collector may run after the answer
  timeout 30 kubectl get configmap child2 -n protons >/dev/null 2>&1 || { gone=1; break; }
  sleep 0.1
done
[ "$gone" = 1 ] || fail "child2 outlived its owner's Background delete"
end

# ---- what is not read ----------------------------------------------------------------
begin "CBOR and text/plain are 415, a broken protobuf body 400"
post() { # post CONTENT-TYPE BODY-FILE : status line and body in $WORK/out
  curl -s -o "$WORK/out" -w '%{http_code}' -X POST -H "Content-Type: $1" \
    --data-binary "@$2" "$URL/api/v1/namespaces/protons/configmaps"
}
printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cbor"}}' >"$WORK/cm.json"
expect_eq "$(post application/cbor "$WORK/cm.json")" 415
expect_in "$WORK/out" '"reason":"UnsupportedMediaType"'
expect_in "$WORK/out" 'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf'
expect_eq "$(post text/plain "$WORK/cm.json")" 415
printf 'k8s\0\n\002v1\022\011ConfigMap\022\377' >"$WORK/bad.pb"
expect_eq "$(post application/vnd.kubernetes.protobuf "$WORK/bad.pb")" 400
expect_in "$WORK/out" '"message":"protobuf: '
expect_eq "$(post application/json "$WORK/cm.json")" 201
expect_eq "$(get '{.metadata.name}' configmap cbor -n protons)" "cbor"
end

kc_report
