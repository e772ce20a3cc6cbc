"""A child process of test_processes.py: runs write operations against a shared store.

    proc_worker.py many URL SCOPE LOG OPS      each of OPS operations once through the decorator,
                                               appending a line to LOG per execution; prints
                                               the results as JSON
    proc_worker.py hang URL SCOPE MARKER        claims `charge`, writes MARKER, then hangs (the
                                               test SIGKILLs it between claim and complete)
    proc_worker.py interrupted URL SCOPE MARKER as hang, but the test sends SIGINT: the
                                               KeyboardInterrupt reaches the caller
"""

import json
import os
import sys
import time

import toolonce


def main() -> None:
    mode, url, scope = sys.argv[1:4]
    store = toolonce.open_store(url)
    if mode == "many":
        log, ops = sys.argv[4], int(sys.argv[5])

        @toolonce.write(store, name="append_line", in_flight=toolonce.Wait(60))
        def append_line(op: int) -> dict:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, f"{op} {os.getpid()}\n".encode())
            finally:
                os.close(fd)
            return {"op": op, "by": os.getpid()}

        results = {}
        with toolonce.scope(scope):
            for op in range(ops):
                results[op] = append_line(op=op)
        print(json.dumps(results))
    elif mode == "hang":
        marker = sys.argv[4]

        @toolonce.write(store, name="charge", lease=0.5)
        def charge(order: str) -> str:
            with open(marker, "w") as f:
                f.write(toolonce.current_key())
            time.sleep(3600)
            return "never"

        charge(order="o1", scope=scope)
    elif mode == "interrupted":
        marker = sys.argv[4]

        @toolonce.write(store, name="charge", lease=0.5)
        def charge(order: str) -> str:
            with open(marker, "w") as f:
                f.write(toolonce.current_key())
            time.sleep(3600)  # Ctrl-C (SIGINT) lands here
            return "never"

        try:
            charge(order="o1", scope=scope)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)


if __name__ == "__main__":
    main()
