"""Hello from Python: connect to the deployment of EDDY_STATE, write a file, read it back into
a NumPy array without a copy, list the directory, and print the job's counters so far.

    EDDY_STATE=/path/to/state python3 hello.py [DIR]
"""

import sys

import numpy as np

import eddy


def main() -> int:
    top = sys.argv[1] if len(sys.argv) > 1 else "/hello-python"
    fs = eddy.connect()
    fs.makedirs(top, exist_ok=True)

    a = np.arange(1 << 18, dtype="f8")  # 2 MiB: crosses chunks and daemons
    with fs.open(f"{top}/a.bin", "wb") as f:
        f.write(a)
    b = np.empty_like(a)
    with fs.open(f"{top}/a.bin", "rb", buffering=0) as f:
        got = f.readinto(b)
    if got != a.nbytes or not (a == b).all():
        print(f"read back {got} bytes, not what was written", file=sys.stderr)
        return 1

    with fs.open(f"{top}/note.txt", "w") as f:
        f.write("written from Python\n")
    print(sorted(fs.listdir(top)))
    print(fs.stat(f"{top}/a.bin").st_size)
    ops = ("write", "direct_commit")  # through the daemons, or directly into their files
    written = sum(o["bytes"] for s in fs.stats() for o in s["ops"] if o["op"] in ops)
    print(f"{written} bytes written so far")
    return 0


if __name__ == "__main__":
    sys.exit(main())
