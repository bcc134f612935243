#!/bin/sh
# One step of an example workflow: says what it does and appends a record to
# ${WFM_OUTPUT:-./out}/WORKFLOW/GID/JOB.txt. An agent runs it with WFM_WORKFLOW, WFM_JOB, WFM_GID and
# WFM_DATE set, in the directory of the workflow file, e.g. `sh scripts/step.sh extract`.
#
# It fails on purpose, to exercise the failure branches, when WFM_FAIL (in the agent's environment)
# names this job (WFM_FAIL="Load JobA") or a file ${WFM_OUTPUT:-./out}/fail/JOB exists.
set -eu
what=${1:?usage: step.sh WHAT}
output=${WFM_OUTPUT:-./out}
echo "$WFM_WORKFLOW $WFM_GID $WFM_DATE: $WFM_JOB $what"
case " ${WFM_FAIL:-} " in
    *" $WFM_JOB "*) echo "$WFM_JOB: failing because WFM_FAIL names it" >&2; exit 1 ;;
esac
if [ -e "$output/fail/$WFM_JOB" ]; then
    echo "$WFM_JOB: failing because $output/fail/$WFM_JOB exists" >&2
    exit 1
fi
mkdir -p "$output/$WFM_WORKFLOW/$WFM_GID"
echo "$WFM_DATE $WFM_JOB $what" >>"$output/$WFM_WORKFLOW/$WFM_GID/$WFM_JOB.txt"
