# The attacker of planted.rs, run as the job's user (nobody): replaces every object given on
# the command line (in the user's own daemon roots and job directories) with one kind of
# object, then, for the socket kinds, serves hostile servers on them until killed.
#
#   attacker.py KIND SECRET PUBLIC CANARY_DIR OWN_FILE LOG_DIR PATH...
#
# KIND: symlink (a link to a root canary: SECRET 0600 and PUBLIC 0644 in turn, CANARY_DIR
# for a directory, CANARY_DIR/fd-service.sock for eddyd.fd and
# CANARY_DIR/service.sock for another socket, sockets of root's; the other kinds leave directories be), fifo, hardlink (to a canary where protected_hardlinks allows it, else
# to OWN_FILE), silent (a socket that accepts and never answers), garbage (a socket that
# answers random bytes), descriptors (on eddyd.fd: every token answered with a descriptor of
# PUBLIC opened read-only, or of SECRET opened O_PATH, in turn; other sockets silent).
# Prints one line per object ("planted PATH: what"), then "ready". Whatever a connection
# sends is appended to LOG_DIR/received (what the attacker learns).

import os
import shutil
import socket
import stat
import sys
import threading
import time

kind, secret, public, canary_dir, own, log_dir = sys.argv[1:7]
targets = sys.argv[7:]
held = []
lock = threading.Lock()


def clear(p):
    try:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)
    except FileNotFoundError:
        pass


def plant(i, p):
    is_dir = os.path.isdir(p) and not os.path.islink(p)
    canary = public if i % 2 else secret
    if kind == "symlink":
        if is_dir:
            target = canary_dir
        elif os.path.basename(p) == "eddyd.fd":
            target = os.path.join(canary_dir, "fd-service.sock")  # a socket of root's
        elif stat.S_ISSOCK(os.lstat(p).st_mode):
            target = os.path.join(canary_dir, "service.sock")  # another of root's
        else:
            target = canary
        clear(p)
        os.symlink(target, p)
        return "symlink to " + target
    if is_dir:
        return None  # a directory is replaced by a link only; its files by every kind
    if kind == "fifo":
        clear(p)
        os.mkfifo(p, 0o600)
        return "fifo"
    if kind == "hardlink":
        clear(p)
        try:
            os.link(canary, p)
            return "hard link to " + canary
        except PermissionError:
            os.link(own, p)
            return "hard link to the attacker's own file (protected_hardlinks refused the canary)"
    clear(p)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(p)
    s.listen(64)
    threading.Thread(target=serve, args=(p, s), daemon=True).start()
    return kind + " server"


def record(data):
    with lock, open(os.path.join(log_dir, "received"), "ab") as f:
        f.write(data)


def serve(p, s):
    n = 0
    while True:
        c, _ = s.accept()
        n += 1
        held.append(c)
        threading.Thread(target=answer, args=(p, c, n), daemon=True).start()


def answer(p, c, n):
    try:
        if kind == "garbage":
            c.sendall(os.urandom(4096))
        while True:
            if kind == "descriptors" and p.endswith("eddyd.fd"):
                token = c.recv(16)
                if not token:
                    return
                record(token)
                if n % 2:
                    fds = [os.open(public, os.O_RDONLY)] * 2
                else:
                    fds = [os.open(secret, os.O_PATH)] * 2
                socket.send_fds(c, [bytes([len(fds)])], fds)
                continue
            data = c.recv(65536)
            if not data:
                return
            record(data)
            if kind == "garbage":
                c.sendall(os.urandom(4096))
    except OSError:
        return


for i, p in enumerate(targets):
    try:
        what = plant(i, p)
    except OSError as e:
        what = "refused: %s" % e
    if what:
        print("planted %s: %s" % (p, what), flush=True)
print("ready", flush=True)
if kind in ("silent", "garbage", "descriptors"):
    while True:
        time.sleep(3600)
