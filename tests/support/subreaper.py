"""Run a command as the child of a subreaper (PR_SET_CHILD_SUBREAPER), as a container's init or a
CI runner adopts orphans: a daemon's orphaned children then get this process as their parent, not
pid 1. It reaps whatever it adopts (as tini does) and exits with the command's status."""

import ctypes
import os
import sys

PR_SET_CHILD_SUBREAPER = 36

if __name__ == "__main__":
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}")
    child = os.fork()
    if child == 0:
        os.execvp(sys.argv[1], sys.argv[1:])
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            sys.exit(os.waitstatus_to_exitcode(status))
