"""The leader of an ``ncrtl regress`` task's process group:
``python -m ncrtl.testbench.regress_leader TMP COMMAND...``.

:func:`ncrtl.testbench.regress.run_task` starts it in a session of its own (so its process
group is the task's); it runs ``COMMAND`` as its child in the group and exits with its status.
Its stdin is a pipe from the worker that nothing writes: it ends only when the worker closes it
or dies (the kernel closes a dead process's files, however it died), and then the leader ends
the group (SIGTERM, SIGKILL after :data:`GRACE` seconds) and removes the task's folder ``TMP``,
which the dead worker can no longer do.

The standard library only: a task pays for this process's start.
"""

import os
import shutil
import signal
import subprocess
import sys
import threading

#: Seconds between SIGTERM and SIGKILL when a task's process group is ended.
GRACE = 5.0


def main(tmp, cmd):
    if os.getpgrp() != os.getpid():  # started without a session of its own: make one, so that
        os.setsid()  # ending the group never reaches the processes of whoever started this
    group = os.getpgrp()
    # The group's SIGTERM is for the command; the leader stays to finish the job (a handler,
    # unlike SIG_IGN, is not inherited by the command).
    signal.signal(signal.SIGTERM, lambda *_: None)
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    ending = threading.Event()

    def watch():
        while os.read(0, 4096):
            pass
        if child.poll() is not None:
            return  # the task ended first: the worker closed the pipe after it
        ending.set()
        os.killpg(group, signal.SIGTERM)
        try:
            child.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(tmp, ignore_errors=True)
        os.killpg(group, signal.SIGKILL)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rc = child.wait()
    if ending.is_set():
        watcher.join()  # the group is being ended: its SIGKILL ends this process too
    os._exit(rc if rc >= 0 else 128 - rc)  # no interpreter shutdown beside the watching thread


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
