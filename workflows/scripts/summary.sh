#!/bin/sh
# Reports what the jobs of this generation left in ${WFM_OUTPUT:-./out}/WORKFLOW/GID: one line per
# record, or a note that there is none. Never fails, so it suits an on="always" job.
set -u
dir=${WFM_OUTPUT:-./out}/$WFM_WORKFLOW/$WFM_GID
echo "$WFM_WORKFLOW $WFM_GID $WFM_DATE: $WFM_JOB summary of $dir"
cat "$dir"/*.txt 2>/dev/null || echo "no records"
