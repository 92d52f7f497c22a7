"""Files and directories graphsignal makes outside the workload's own
paths, made so that another local user cannot steer them.

  - private_dir(): a directory only we can write, under a per-user root
    in the temp directory ($TMPDIR/graphsignal-<uid>, mode 0700). Both are
    created if missing and, created or found, checked after the fact with
    lstat: a directory (never a symlink), owned by us, no group or other
    bits. Anything else is refused (UnsafePath, whose message says what is
    wrong and what to do), because what we put there goes on the
    workload's PYTHONPATH and LD_LIBRARY_PATH, and a file another user
    planted there would run as us.
  - write_atomic(): the final payload, written to a random name in the
    target's directory (mkstemp: O_EXCL, 0600), fsynced, and renamed onto
    the target only when the target is a regular file or missing. A
    device, FIFO, socket or directory is refused (UnsafePath), never
    replaced; a symlink is followed only when we own it (as the kernel's
    protected_symlinks does in sticky directories). Nothing is left
    behind on any failure.
  - output_folder(): whether that directory exists and we may make files
    in it, asked before the workload starts (NoFolder otherwise): a
    missing folder would lose the payload only at the end of the run.

Standard library only: the supervisor imports this before the workload
starts.
"""
import os
import stat
import tempfile


class UnsafePath(OSError):
    """A path we will not use; str() is one line for the user."""


class NoFolder(OSError):
    """The folder a file is to be written in is missing, not a folder, or
    not writable by us; str() is one line for the user."""


def _euid():
    return os.geteuid()


def _check_private_dir(path, what):
    """Raises UnsafePath unless path is a directory (not a symlink) owned
    by us with no group or other permission bits."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise UnsafePath("cannot use %s %s (%s)" % (what, path, e.strerror or e)) from e
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath("%s %s is a symlink; not following it (remove it)" % (what, path))
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath("%s %s is not a directory (remove it)" % (what, path))
    if st.st_uid != _euid():
        raise UnsafePath("%s %s belongs to uid %d, not to us (uid %d); not using it (remove it, or set TMPDIR)"
                         % (what, path, st.st_uid, _euid()))
    if st.st_mode & 0o077:
        raise UnsafePath("%s %s is open to other users (mode %o); not using it (remove it, or chmod 700 it)"
                         % (what, path, stat.S_IMODE(st.st_mode)))


def _check_ancestors(path):
    """Every directory from path up to / must be out of other users'
    reach: owned by us or root, and not writable by others unless sticky
    (/tmp). Otherwise whoever owns or may write one of them could rename
    our directory away after we checked it and put their own in its place
    (the workload's later processes read PYTHONPATH again). path is a real
    path (no symlinks: realpath first)."""
    d = path
    while True:
        try:
            st = os.lstat(d)
        except OSError as e:
            raise UnsafePath("cannot use %s (%s)" % (d, e.strerror or e)) from e
        if st.st_uid not in (0, _euid()):
            raise UnsafePath("%s belongs to uid %d, who could swap what we make in it; not making private "
                             "directories there (set TMPDIR)" % (d, st.st_uid))
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise UnsafePath("%s is writable by other users and not sticky; not making private directories in it "
                             "(set TMPDIR)" % d)
        parent = os.path.dirname(d)
        if parent == d:
            return
        d = parent


def _mkdir_private(path, what):
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise UnsafePath("cannot make %s %s (%s)" % (what, path, e.strerror or e)) from e
    _check_private_dir(path, what)


def private_root(tmp_root=None):
    """Our per-user directory in the temp directory, made and checked
    (raises UnsafePath)."""
    root = tmp_root or os.path.join(tempfile.gettempdir(), "graphsignal-%d" % _euid())
    # the real path: what goes on PYTHONPATH must not pass through a
    # symlink someone could point elsewhere later
    root = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(root))), os.path.basename(root))
    _check_ancestors(os.path.dirname(root))
    _mkdir_private(root, "graphsignal's temp directory")
    return root


def private_dir(name, tmp_root=None):
    """root/name, a directory only we can write (raises UnsafePath)."""
    d = os.path.join(private_root(tmp_root), name)
    _mkdir_private(d, "graphsignal's temp directory")
    return d


def _umask():
    """The process's umask, read without changing it (os.umask would, for
    every thread, for a moment)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _kind(mode):
    return ("a directory" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def _is_descriptor(path):
    """/proc/... and /dev/fd/... name files through a process's open
    descriptors (/dev/stdout is a link to /proc/self/fd/1): renaming onto
    what one points to would replace, say, the log file the workload's
    stderr goes to."""
    return path.startswith(("/proc/", "/dev/fd/")) or path in ("/proc", "/dev/fd")


def output_target(path):
    """The path write_atomic() would replace for path: path itself, or
    what a symlink of ours points to. Raises UnsafePath for a target that
    is not a regular file or a missing name."""
    path = given = os.path.abspath(path)
    for _ in range(40):  # SYMLOOP_MAX
        if _is_descriptor(path):
            raise UnsafePath("%s is under /proc or /dev/fd%s, where names stand for processes and their open "
                             "file descriptors; not writing there (name a regular file)"
                             % (given, "" if path == given else " (%s)" % path))
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return path
        except OSError as e:
            raise UnsafePath("cannot write %s (%s)" % (path, e.strerror or e)) from e
        if stat.S_ISREG(st.st_mode):
            return path
        if not stat.S_ISLNK(st.st_mode):
            raise UnsafePath("%s is %s; not replacing it (name a regular file)" % (path, _kind(st.st_mode)))
        if st.st_uid != _euid():
            raise UnsafePath("%s is a symlink of uid %d, not ours; not following it" % (path, st.st_uid))
        try:
            # what it finally names, /proc's links to pipes and sockets included
            end = os.stat(path).st_mode
        except OSError:
            end = None  # dangling: a file to make, where the link points
        if end is not None and not stat.S_ISREG(end):
            raise UnsafePath("%s is %s; not replacing it (name a regular file)" % (path, _kind(end)))
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    raise UnsafePath("%s: too many levels of symbolic links" % path)


def output_folder(path: str) -> str:
    """The folder write_atomic(path) makes its temporary file in (that of
    output_target(path)). Raises UnsafePath as output_target does, and
    NoFolder when the folder does not exist, is not a folder, or this
    process cannot make files in it (a read-only mount too, even for root)."""
    try:
        folder = os.path.dirname(output_target(path))
    except UnsafePath as e:
        if isinstance(e.__cause__, NotADirectoryError):  # a file where a folder of the path should be
            raise NoFolder("%s is not a folder" % _file_in_the_way(os.path.dirname(os.path.abspath(path)))) from e
        raise
    try:
        st = os.stat(folder)
    except FileNotFoundError as e:
        raise NoFolder("the folder %s does not exist" % _missing_part(folder)) from e
    except NotADirectoryError as e:
        raise NoFolder("%s is not a folder" % folder) from e
    except OSError as e:
        raise NoFolder("cannot reach the folder %s (%s)" % (folder, e.strerror or e)) from e
    if not stat.S_ISDIR(st.st_mode):
        raise NoFolder("%s is not a folder" % folder)
    # effective ids: graphsignal-run may be setuid-wrapped; access() alone asks for the real ones
    kw = {"effective_ids": True} if os.access in os.supports_effective_ids else {}
    if not os.access(folder, os.W_OK | os.X_OK, **kw):
        raise NoFolder("the folder %s is not writable by this user%s" % (
            folder, " (a read-only file system)" if _read_only(folder) else ""))
    return folder


def _missing_part(folder):
    """The first folder of the path that does not exist (/a/b/c with only
    /a: /a/b), so the line says what to make."""
    head = folder
    while True:
        parent = os.path.dirname(head)
        if parent == head or os.path.lexists(parent):
            return head
        head = parent


def _file_in_the_way(folder):
    """The deepest part of folder that exists (a file, when lstat said ENOTDIR)."""
    head = folder
    while not os.path.lexists(head) and os.path.dirname(head) != head:
        head = os.path.dirname(head)
    return head


def _read_only(folder):
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def write_atomic(path, data):
    """Writes data (bytes) to path as one rename: readers see the old file
    or the new one, never a part. Returns the path written (a symlink's
    target). Raises UnsafePath or OSError; leaves nothing behind."""
    target = output_target(path)
    directory = os.path.dirname(target)
    mode = 0o666 & ~_umask()
    try:
        st = os.stat(target)
        if st.st_uid == _euid():
            mode = stat.S_IMODE(st.st_mode) & 0o777  # a file of ours keeps its mode (never setuid, setgid, sticky)
    except FileNotFoundError:
        pass
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=".tmp", dir=directory)
    except OSError as e:
        raise _named(e, path)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        # Checked again just before the rename: a target that turned into
        # something else meanwhile is not replaced.
        if output_target(path) != target:
            raise UnsafePath("%s changed while it was being written; not replacing it" % path)
        os.rename(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and not isinstance(e, UnsafePath):
            raise _named(e, path)
        raise
    return target


def _named(e, path):
    """The OSError with the user's path in it, not the temporary file's
    (`[Errno 13] Permission denied: 'out.json'`, never '.out.json.x1y2.tmp')."""
    if e.errno is None:
        return e
    out = OSError(e.errno, e.strerror, path)
    out.__cause__ = e
    return out
