#!/usr/bin/env bash
# Server-side apply with the real kubectl against `kbrun sim`
# (src/sim/k8s/k8s_apply.c): `kubectl apply --server-side` creates and updates
# with managedFields per field manager; another manager changing an owned
# field is refused with the apiserver's conflict message until
# --force-conflicts; a field a manager stops applying is removed; fields set
# by a client-side `kubectl apply` belong to kubectl-client-side-apply;
# --dry-run=server stores nothing. A missing kubectl fails when
# KBRUN_REQUIRE_KUBECTL=1 (CI), else skips.
set -u
. "$(dirname "$0")/kubectl_common.bash"
kc_init kubectl_apply
expect_out() { [ "$(cat "$WORK/out")" = "$1" ] || fail "$2: '$(cat "$WORK/out")', expected '$1'"; }
kc_start_sim

cm() { # cm FILE A B [LABEL]: a ConfigMap with data a, b and an optional label
  {
    echo "apiVersion: v1"; echo "kind: ConfigMap"; echo "metadata:"; echo "  name: ssa"
    [ -n "${4:-}" ] && { echo "  labels:"; echo "    team: $4"; }
    echo "data:"; [ -n "$2" ] && echo "  a: \"$2\""; [ -n "$3" ] && echo "  b: \"$3\""
  } >"$1"
}

cm "$WORK/v1.yaml" 1 2 red
k apply --server-side --dry-run=server -f "$WORK/v1.yaml"
[ "$CODE" = 0 ] || fail "server-side dry run: exit $CODE: $(cat "$WORK/out")"
k get cm ssa
expect_has 'configmaps "ssa" not found' "get after a dry run"

k apply --server-side -f "$WORK/v1.yaml"
[ "$CODE" = 0 ] || fail "apply --server-side: exit $CODE: $(cat "$WORK/out")"
expect_has "configmap/ssa serverside-applied" "apply --server-side"
k get cm ssa -o jsonpath='{.metadata.managedFields[*].manager}/{.metadata.managedFields[*].operation}'
expect_out "kubectl/Apply" "managers after the first apply"

# another manager changes a: a conflict with kubectl, nothing changed
cm "$WORK/v2.yaml" 9 "" ""
k apply --server-side --field-manager=ops -f "$WORK/v2.yaml"
[ "$CODE" != 0 ] || fail "a conflicting apply succeeded"
expect_has 'Apply failed with 1 conflict: conflict with "kubectl" using v1: .data.a' "conflicting apply"
k get cm ssa -o jsonpath='{.data.a}'
expect_out 1 "data.a after a refused apply"
k apply --server-side --field-manager=ops --force-conflicts -f "$WORK/v2.yaml"
[ "$CODE" = 0 ] || fail "apply --force-conflicts: exit $CODE: $(cat "$WORK/out")"
k get cm ssa -o jsonpath='{.data.a}'
expect_out 9 "data.a after --force-conflicts"

# kubectl stops applying b and the label: both go (nobody else owns them);
# a is ops' now and stays
cm "$WORK/v3.yaml" "" "" ""
echo "data: {}" >>"$WORK/v3.yaml"
k apply --server-side -f "$WORK/v3.yaml"
[ "$CODE" = 0 ] || fail "apply of less: exit $CODE: $(cat "$WORK/out")"
k get cm ssa -o jsonpath='{.data}|{.metadata.labels}'
expect_out '{"a":"9"}|' "fields left after kubectl stopped applying b and the label"

# client-side apply records its fields as kubectl-client-side-apply
cm "$WORK/csa.yaml" 1 2 ""
sed -i 's/name: ssa/name: csa/' "$WORK/csa.yaml"
k apply -f "$WORK/csa.yaml"
[ "$CODE" = 0 ] || fail "client-side apply: exit $CODE: $(cat "$WORK/out")"
cm "$WORK/csa2.yaml" 1 5 ""
sed -i 's/name: ssa/name: csa/' "$WORK/csa2.yaml"
k apply --server-side -f "$WORK/csa2.yaml"
[ "$CODE" != 0 ] || fail "a server-side apply over client-side-applied fields did not conflict"
expect_has 'conflict with "kubectl-client-side-apply" using v1: .data.b' "server-side over client-side apply"

kc_report
