#!/usr/bin/env bash
# Tests scripts/jobs.sh: a background job's status survives bash forgetting
# the job. By default bash is made to forget with a bare `wait` (what a
# reused process id does to a single job, without running 32 768
# processes); JOBS_TEST_PID_WRAP=1 instead starts more processes than
# kernel.pid_max after the jobs end, so their ids really come round again
# (minutes), and checks that `wait PID` itself has lost them.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/jobs.sh
JOBS_DIR=$(mktemp -d)
trap 'rm -rf "$JOBS_DIR"' EXIT

fail() {
  echo "jobs-test: $*" >&2
  exit 1
}

job_start passes true
job_start fails sh -c 'echo some output; exit 3'
# The job's own shell killed (by its command) before it writes a status.
job_start killed sh -c 'kill -9 "$PPID"'
pids=$(cat "$JOBS_DIR/passes.pid" "$JOBS_DIR/fails.pid" "$JOBS_DIR/killed.pid")

if [ "${JOBS_TEST_PID_WRAP:-0}" = 1 ]; then
  for pid in $pids; do wait "$pid" || true; done
  max=$(cat /proc/sys/kernel/pid_max)
  for ((i = 0; i <= max; i++)); do /bin/true; done
  for pid in $pids; do
    # Once the id came round, bash no longer knows the job: the failure
    # this mechanism exists for.
    if wait "$pid" 2>/dev/null; then fail "bash still knows job $pid after $max processes"; fi
  done
  echo "jobs-test: $((max + 1)) processes ran after the jobs ended"
else
  wait
  for pid in $pids; do
    if wait "$pid" 2>/dev/null; then fail "a bare wait left bash knowing job $pid"; fi
  done
fi

job_status passes
[ "$JOB_STATUS" = 0 ] || fail "a job that passed is reported as exit $JOB_STATUS"
job_status fails
[ "$JOB_STATUS" = 3 ] || fail "a job that failed with 3 is reported as exit $JOB_STATUS"
job_status killed
[ "$JOB_STATUS" = 255 ] || fail "a killed job is reported as exit $JOB_STATUS"
out=$( (job_finish fails) 2>&1) && fail "job_finish of a failed job succeeded"
grep -q "some output" <<<"$out" || fail "job_finish did not show the job's log"
grep -q "fails failed (exit 3)" <<<"$out" || fail "job_finish did not name the failure: $out"
(job_finish passes) >/dev/null || fail "job_finish of a passed job failed"

# A shell function as a job stops at its first failing step, as under
# errexit.
two_steps() {
  false
  echo "after the failure"
}
job_start function two_steps
job_status function
[ "$JOB_STATUS" = 1 ] || fail "a function job whose first step failed reported exit $JOB_STATUS"
! grep -q "after the failure" "$JOBS_DIR/function.log" || fail "a function job went on after a failing step"

# A job still running when job_status is called is waited for: it blocks
# on a fifo that is written only after job_status has started.
mkfifo "$JOBS_DIR/gate"
job_start running sh -c 'read -r line <"$0"; [ "$line" = go ] && exit 7' "$JOBS_DIR/gate"
[ ! -e "$JOBS_DIR/running.status" ] || fail "the gated job ended before its gate opened"
echo go >"$JOBS_DIR/gate" &
job_status running
[ "$JOB_STATUS" = 7 ] || fail "a running job's status was $JOB_STATUS, expected 7"
wait
echo "jobs-test: statuses kept (passed 0, failed 3, killed 255, waited-for 7)"
