# Background jobs whose exit status cannot be lost (sourced by scripts/test.sh).
#
# Bash keeps the status of a finished background child only until its
# process id is used again; a suite that starts tens of thousands of
# processes goes round `kernel.pid_max` and `wait PID` then answers "not a
# child of this shell" (exit 127). So each job writes its own status to a
# file when it ends, and `job_finish` reads that file: `wait` is only used to
# block while the job still runs, and its answer is never trusted.
#
#   job_start NAME CMD...   runs CMD (a program or a shell function) in the background, output to $JOBS_DIR/NAME.log
#   job_finish NAME         waits for NAME, shows its log, fails (exit status) if it failed
#
# JOBS_DIR must name an existing directory before the first job_start.

# Starts "$@" in the background as job $1; its output goes to $JOBS_DIR/$1.log.
job_start() {
  local name=$1
  shift
  rm -f "$JOBS_DIR/$name.status"
  (
    # The command in a subshell of its own with errexit on (a shell
    # function's failing step ends it), its status taken with errexit off.
    set +e
    (
      set -e
      "$@"
    ) >"$JOBS_DIR/$name.log" 2>&1
    # Written to a temporary name and renamed, so a reader never sees half.
    echo $? >"$JOBS_DIR/$name.status.tmp"
    mv "$JOBS_DIR/$name.status.tmp" "$JOBS_DIR/$name.status"
  ) &
  echo $! >"$JOBS_DIR/$name.pid"
}

# Sets JOB_STATUS to the exit status of job $1, waiting for it if it still
# runs; 255 if the job ended without writing one (killed). (Not a command
# substitution: `wait` in a subshell waits for nothing.)
job_status() {
  local name=$1 pid
  if [ ! -e "$JOBS_DIR/$name.status" ]; then
    pid=$(cat "$JOBS_DIR/$name.pid")
    # While the job runs its id is ours and cannot be reused; once it has
    # ended, wait's answer (maybe "not a child") says nothing: the file does.
    wait "$pid" 2>/dev/null || true
  fi
  if [ -e "$JOBS_DIR/$name.status" ]; then
    JOB_STATUS=$(cat "$JOBS_DIR/$name.status")
  else
    JOB_STATUS=255
  fi
}

# Waits for job $1, shows its log; a failed job ends the calling shell with
# its status.
job_finish() {
  local name=$1
  job_status "$name"
  cat "$JOBS_DIR/$name.log"
  if [ "$JOB_STATUS" != 0 ]; then
    echo "$name failed (exit $JOB_STATUS)" >&2
    exit "$JOB_STATUS"
  fi
}
