# System calls the escape suite tries from inside the sandbox, one per run:
#   python3 sys.py OPERATION ARGS...
# Prints ESCAPED when the operation succeeded (the sandbox let it through),
# and the error otherwise. Written for x86_64 and aarch64 Linux.
import ctypes
import ctypes.util
import errno
import os
import platform
import socket
import sys

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
libc.syscall.restype = ctypes.c_long
X86 = platform.machine() == "x86_64"
NR = {
    "name_to_handle_at": 303 if X86 else 264,
    "open_by_handle_at": 304 if X86 else 265,
    "bpf": 321 if X86 else 280,
    "perf_event_open": 298 if X86 else 241,
    "add_key": 248 if X86 else 217,
    "keyctl": 250 if X86 else 219,
    "io_uring_setup": 425,
    "userfaultfd": 323 if X86 else 282,
    "process_vm_writev": 311 if X86 else 271,
    "prlimit64": 302 if X86 else 261,
    "setns": 308 if X86 else 268,
    "open_tree": 428,
    "fsopen": 430,
}


def fail(what):
    e = ctypes.get_errno()
    print(f"{what}: {os.strerror(e)} (errno {e})")
    sys.exit(1)


def escaped():
    print("ESCAPED")
    sys.exit(0)


def check(rc, what):
    if rc < 0:
        fail(what)
    return rc


op, args = sys.argv[1], sys.argv[2:]

if op == "handle_open":
    # name_to_handle_at + open_by_handle_at(O_RDWR): reopen a file through a
    # file handle, bypassing the path (and so a read-only bind).
    class Handle(ctypes.Structure):
        _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("f", ctypes.c_ubyte * 128)]

    h = Handle(bytes=128)
    mount_id = ctypes.c_int()
    check(libc.syscall(NR["name_to_handle_at"], -100, args[0].encode(), ctypes.byref(h), ctypes.byref(mount_id), 0), "name_to_handle_at")
    mfd = os.open("/", os.O_RDONLY)
    fd = check(libc.syscall(NR["open_by_handle_at"], mfd, ctypes.byref(h), os.O_RDWR), "open_by_handle_at")
    os.write(fd, b"pwned")
    escaped()
elif op == "linkat_empty":
    fd = os.open(args[0], os.O_RDONLY)
    check(libc.linkat(fd, b"", -100, args[1].encode(), 0x1000), "linkat(AT_EMPTY_PATH)")
    escaped()
elif op == "setxattr":  # PATH NAME HEX-VALUE
    value = bytes.fromhex(args[2])
    try:
        os.setxattr(args[0], args[1], value, follow_symlinks=False)
    except OSError as e:
        print(f"setxattr: {e}")
        sys.exit(1)
    escaped()
elif op == "removexattr":
    try:
        os.removexattr(args[0], args[1], follow_symlinks=False)
    except OSError as e:
        print(f"removexattr: {e}")
        sys.exit(1)
    escaped()
elif op == "ptrace_attach":
    check(libc.ptrace(16, int(args[0]), 0, 0), "ptrace(PTRACE_ATTACH)")
    escaped()
elif op == "ptrace_seize":
    check(libc.ptrace(0x4206, int(args[0]), 0, 0), "ptrace(PTRACE_SEIZE)")
    escaped()
elif op == "process_vm_writev":
    buf = ctypes.create_string_buffer(b"x")

    class Iov(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    local = Iov(ctypes.cast(buf, ctypes.c_void_p), 1)
    remote = Iov(0x1000, 1)
    check(libc.syscall(NR["process_vm_writev"], int(args[0]), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0), "process_vm_writev")
    escaped()
elif op == "bpf_map":
    attr = (ctypes.c_uint32 * 32)(2, 4, 4, 16)  # BPF_MAP_TYPE_ARRAY, key 4, value 4, 16 entries
    check(libc.syscall(NR["bpf"], 0, ctypes.byref(attr), 128), "bpf(BPF_MAP_CREATE)")
    escaped()
elif op == "perf_all_cpus":
    attr = (ctypes.c_uint32 * 32)()
    attr[0] = 1  # PERF_TYPE_SOFTWARE
    attr[1] = 128  # size
    check(libc.syscall(NR["perf_event_open"], ctypes.byref(attr), -1, 0, -1, 0), "perf_event_open(pid=-1, cpu=0)")
    escaped()
elif op == "add_key":
    check(libc.syscall(NR["add_key"], b"user", b"dsh-escape", b"x", 1, -4), "add_key")
    escaped()
elif op == "keyctl_join":
    check(libc.syscall(NR["keyctl"], 1, None), "keyctl(JOIN_SESSION_KEYRING)")
    escaped()
elif op == "io_uring":
    params = (ctypes.c_uint32 * 30)()
    check(libc.syscall(NR["io_uring_setup"], 8, ctypes.byref(params)), "io_uring_setup")
    escaped()
elif op == "userfaultfd":
    check(libc.syscall(NR["userfaultfd"], 0), "userfaultfd")
    escaped()
elif op == "prlimit":
    lim = (ctypes.c_uint64 * 2)(12, 12)
    check(libc.syscall(NR["prlimit64"], int(args[0]), 7, ctypes.byref(lim), None), "prlimit64(RLIMIT_NOFILE)")
    escaped()
elif op == "setns_host":
    fd = os.open(args[0], os.O_RDONLY)
    check(libc.syscall(NR["setns"], fd, 0), "setns")
    escaped()
elif op == "mount_bind":
    check(libc.mount(args[0].encode(), args[1].encode(), None, 4096 | 16384, None), "mount(MS_BIND)")
    escaped()
elif op == "remount_rw":
    check(libc.mount(None, args[0].encode(), None, 32 | 4096, None), "mount(MS_REMOUNT|MS_BIND)")
    escaped()
elif op == "umount":
    check(libc.umount2(args[0].encode(), 2), "umount2(MNT_DETACH)")
    escaped()
elif op == "open_tree":
    check(libc.syscall(NR["open_tree"], -100, args[0].encode(), 1), "open_tree(OPEN_TREE_CLONE)")
    escaped()
elif op == "fsopen":
    check(libc.syscall(NR["fsopen"], b"tmpfs", 0), "fsopen")
    escaped()
elif op == "chroot":
    check(libc.chroot(args[0].encode()), "chroot")
    escaped()
elif op == "mknod":
    kind = {"block": 0o060000, "char": 0o020000}[args[1]]
    dev = os.makedev(int(args[2]), int(args[3]))
    check(libc.mknod(args[0].encode(), kind | 0o666, ctypes.c_ulong(dev)), f"mknod({args[1]})")
    escaped()
elif op == "o_tmpfile":
    try:
        fd = os.open(args[0], os.O_TMPFILE | os.O_WRONLY, 0o600)
    except OSError as e:
        print(f"O_TMPFILE: {e}")
        sys.exit(1)
    os.write(fd, b"x")
    escaped()
elif op == "unix_connect":
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(args[0] if not args[0].startswith("@") else "\0" + args[0][1:])
    except OSError as e:
        print(f"connect: {e}")
        sys.exit(1)
    escaped()
elif op == "unix_connect_opath":
    # An O_PATH descriptor of the socket file, connected to through
    # /proc/self/fd/N (and through /proc/<pid>/fd/N).
    fd = os.open(args[0], os.O_PATH)
    for path in (f"/proc/self/fd/{fd}", f"/proc/{os.getpid()}/fd/{fd}"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError as e:
            print(f"connect {path}: {e}")
            continue
        escaped()
    sys.exit(1)
elif op in ("unix_sendto", "unix_sendmsg", "unix_dgram_connect", "unix_sendmmsg"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        if op == "unix_sendto":
            s.sendto(b"ESCAPED", args[0])
        elif op == "unix_sendmsg":
            s.sendmsg([b"ESC", b"APED"], [], 0, args[0])
        elif op == "unix_dgram_connect":
            s.connect(args[0])
            s.send(b"ESCAPED")
        else:
            class Iov(ctypes.Structure):
                _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

            class Hdr(ctypes.Structure):
                _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint), ("iov", ctypes.POINTER(Iov)),
                            ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                            ("flags", ctypes.c_int)]

            class Msg(ctypes.Structure):
                _fields_ = [("hdr", Hdr), ("msg_len", ctypes.c_uint)]
            path = args[0].encode()
            addr = ctypes.create_string_buffer(b"\x01\x00" + path + b"\x00", 110)
            data = ctypes.create_string_buffer(b"ESCAPED")
            iov = Iov(ctypes.cast(data, ctypes.c_void_p), 7)
            msgs = (Msg * 2)()
            for m in msgs:
                m.hdr.name = ctypes.cast(addr, ctypes.c_void_p)
                m.hdr.namelen = 2 + len(path) + 1
                m.hdr.iov = ctypes.pointer(iov)
                m.hdr.iovlen = 1
            check(libc.sendmmsg(s.fileno(), msgs, 2, 0), "sendmmsg")
    except OSError as e:
        print(f"{op}: {e}")
        sys.exit(1)
    escaped()
elif op == "unix_symlink_race":
    # unix_symlink_race DIR OUTSIDE N: DIR/race is a directory holding a
    # listening socket of our own, swapped over and over for a symlink to
    # OUTSIDE (which holds a socket of the same name) by a child, while we
    # connect N times to DIR/race/stream.sock. What got through is seen
    # by OUTSIDE's listener.
    d = os.path.join(args[0], "race")
    os.makedirs(d, exist_ok=True)
    own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    own.bind(os.path.join(d, "stream.sock"))
    own.listen(4096)
    pid = os.fork()
    if pid == 0:
        while True:
            try:
                os.rename(d, d + ".d")
                os.symlink(args[1], d)
                os.unlink(d)
                os.rename(d + ".d", d)
            except OSError:
                pass
    inside = 0
    for _ in range(int(args[2])):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(os.path.join(d, "stream.sock"))
            inside += 1
        except OSError:
            pass
        s.close()
        try:
            own.setblocking(False)
            while True:
                own.accept()[0].close()
        except OSError:
            pass
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print(f"{inside} connections made")
    sys.exit(1)
elif op == "unix_address_race":
    # unix_address_race INSIDE OUTSIDE N: one thread connects N times with
    # an address buffer that another thread keeps rewriting between INSIDE
    # (a socket we listen on) and OUTSIDE.
    import threading
    own = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    own.bind(args[0])
    own.listen(4096)
    own.setblocking(False)
    a = b"\x01\x00" + args[0].encode() + b"\x00"
    b = b"\x01\x00" + args[1].encode() + b"\x00"
    size = max(len(a), len(b))
    buf = ctypes.create_string_buffer(a, size)
    stop = False

    def flip():
        while not stop:
            ctypes.memmove(buf, b, len(b))
            ctypes.memmove(buf, a, len(a))
    t = threading.Thread(target=flip)
    t.start()
    made = 0
    for _ in range(int(args[2])):
        fd = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if libc.connect(fd.fileno(), buf, size) == 0:
            made += 1
        fd.close()
        try:
            while True:
                own.accept()[0].close()
        except OSError:
            pass
    stop = True
    t.join()
    print(f"{made} connections made")
    sys.exit(1)
elif op == "socket":
    fam = {"raw": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
           "packet": (17, socket.SOCK_RAW, 0),
           "netlink": (socket.AF_NETLINK, socket.SOCK_RAW, 0),
           "inet6raw": (socket.AF_INET6, socket.SOCK_RAW, 58),
           "packet_dgram": (17, socket.SOCK_DGRAM, 0),
           "vsock": (40, socket.SOCK_STREAM, 0)}[args[0]]
    try:
        socket.socket(*fam)
    except OSError as e:
        print(f"socket({args[0]}): {e}")
        sys.exit(1)
    escaped()
elif op == "shm_write":
    libc.shmget.restype = ctypes.c_int
    libc.shmat.restype = ctypes.c_void_p
    sid = check(libc.shmget(int(args[0]), 0, 0), "shmget")
    addr = libc.shmat(sid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        fail("shmat")
    ctypes.memmove(addr, b"pwned", 5)
    escaped()
elif op == "msg_create":
    check(libc.msgget(int(args[0]), 0o1000 | 0o600), "msgget(IPC_CREAT)")
    escaped()
elif op == "sethostname":
    check(libc.sethostname(b"dsh-escaped", 11), "sethostname")
    escaped()
elif op == "setdomainname":
    check(libc.setdomainname(b"dsh-escaped", 11), "setdomainname")
    escaped()
elif op == "kill":
    check(libc.kill(int(args[0]), int(args[1])), "kill")
    escaped()
elif op == "setid":
    # setid HOW FILE: give FILE (made here) a set-user-ID or set-group-ID
    # bit one way; ESCAPED if the bit is there afterwards.
    how, path = args[0], args[1]
    bits = 0o2755 if how.endswith("_gid") else 0o4755
    how = how.removesuffix("_gid")
    NR.update({"openat2": 437, "fchmodat2": 452})

    def made():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o755)
        os.close(fd)
    try:
        if how == "chmod":
            made()
            os.chmod(path, bits)
        elif how == "fchmod":
            made()
            fd = os.open(path, os.O_RDONLY)
            os.fchmod(fd, bits)
        elif how == "fchmodat2":
            made()
            check(libc.syscall(NR["fchmodat2"], -100, path.encode(), bits, 0), "fchmodat2")
        elif how == "open":
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, bits))
        elif how == "creat":
            check(libc.creat(path.encode(), bits), "creat")
        elif how == "mknod":
            os.mknod(path, 0o100000 | bits)
        elif how == "tmpfile":
            fd = os.open(os.path.dirname(path), os.O_TMPFILE | os.O_WRONLY, bits)
            # linkat(AT_SYMLINK_FOLLOW): os.link calls link(2), which does
            # not follow the /proc/self/fd link.
            check(libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, path.encode(), 0x400), "linkat")
        elif how == "openat2":
            class How(ctypes.Structure):
                _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
            h = How(os.O_CREAT | os.O_WRONLY, bits, 0)
            check(libc.syscall(NR["openat2"], -100, path.encode(), ctypes.byref(h), ctypes.sizeof(h)), "openat2")
        else:
            raise SystemExit(f"unknown way {how}")
    except OSError as e:
        print(f"{how}: {e}")
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        sys.exit(1)
    if mode & 0o6000:
        escaped()
    print(f"mode {mode:o}")
    sys.exit(1)
elif op == "setid_tar":
    # A tar archive holding an empty set-user-ID file named suid.
    import io
    import tarfile
    with tarfile.open(args[0], "w") as t:
        info = tarfile.TarInfo("suid")
        info.mode = 0o4755
        t.addfile(info, io.BytesIO(b""))
    sys.exit(0)
elif op == "lease":
    import fcntl
    fd = os.open(args[0], os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError as e:
        print(f"F_SETLEASE: {e}")
        sys.exit(1)
    escaped()
else:
    print(f"unknown operation {op}")
    sys.exit(2)
