#!/bin/sh
# policy-ci.sh: the checks of a pull request that changes SchedulingPolicies
# (docs/gitops-ci.md).
#
#   policy-ci.sh POLICY_DIR TEST_DIR CLUSTER_DUMP [BASE_POLICY_DIR]
#
# POLICY_DIR       the policies of the pull request, all of them (its checkout)
# TEST_DIR         its PolicyTest suites
# CLUSTER_DUMP     a dump of the cluster the policies are for, e.g.
#                    kubectl get nodes,namespaces,pods,schedulingpolicies -A -o yaml
# BASE_POLICY_DIR  the policies in force; default: the SchedulingPolicies of
#                  the dump (what the cluster runs)
#
# Environment: CELSCHED, the CLI (default: celsched on the PATH); FAIL_ON,
# the impact changes that fail the job (default:
# stranded,held,evicted-would-not-return).
#
# Exit status: 0 when every check passes, 1 when one fails, 2 on bad input.
set -eu

if [ $# -lt 3 ]; then
	echo "usage: $0 POLICY_DIR TEST_DIR CLUSTER_DUMP [BASE_POLICY_DIR]" >&2
	exit 2
fi
policies=$1 tests=$2 dump=$3 base=${4:-}
celsched=${CELSCHED:-celsched}
fail_on=${FAIL_ON:-stranded,held,evicted-would-not-return}

set -x
"$celsched" validate -f "$policies"
"$celsched" test "$tests"
# --prune: POLICY_DIR is the whole set, so a policy it no longer has is
# deleted.
"$celsched" impact -f "$policies" --dump "$dump" ${base:+--policies "$base"} --prune --fail-on "$fail_on"
