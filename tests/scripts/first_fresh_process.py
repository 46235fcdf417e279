"""Start this interpreter's first spawned fresh process (Python's resource tracker not yet
running) and record, from inside the child, its signal mask while it imports this file: the
moment before its target (and ``owned_child``) runs. Usage: ``first_fresh_process.py OUT``."""

import sys

if __name__ == "__mp_main__":  # the spawned child re-importing the parent's main file
    with open("/proc/self/status") as status:
        blocked = next(line.split()[1] for line in status if line.startswith("SigBlk:"))
    with open(sys.argv[1], "w") as out:
        out.write(blocked)


def answer(conn) -> None:
    conn.send(("done",))


if __name__ == "__main__":
    from fastload.utils.process import FreshProcess

    proc = FreshProcess(answer, name="first-fresh-process")
    print(proc.answer(120)[0])
    proc.stop()
