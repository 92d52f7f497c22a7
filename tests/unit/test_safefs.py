"""graphsignal.safefs: private directories another local user cannot
steer, and output files written through random names, never through a
planted symlink or onto a device. "Another user" is uid 65534: the tests
run as root, which can hand a file to any uid (as that user making it
would); without root those cases skip."""
import os
import stat
import subprocess
import sys

import pytest

from graphsignal import safefs

OTHER = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files of another uid")


def _give(path, uid=OTHER):
    os.lchown(str(path), uid, uid)


# -- private directories -------------------------------------------------------------
def test_private_dir_is_made_0700_and_found_again(tmp_path):
    root = tmp_path / "gs"
    d = safefs.private_dir("py-abc", str(root))
    assert d == str(root / "py-abc")
    for p in (root, root / "py-abc"):
        st = os.lstat(str(p))
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert safefs.private_dir("py-abc", str(root)) == d


@as_root
@pytest.mark.parametrize("where", ["root", "sub"])
def test_a_directory_of_another_user_is_refused(tmp_path, where):
    root = tmp_path / "gs"
    (root / "py-abc").mkdir(parents=True, mode=0o700)
    os.chmod(str(root), 0o700)
    _give(root if where == "root" else root / "py-abc")
    with pytest.raises(safefs.UnsafePath, match="belongs to uid 65534"):
        safefs.private_dir("py-abc", str(root))


def test_a_symlink_is_never_followed(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    root = tmp_path / "gs"
    root.symlink_to(mine)
    with pytest.raises(safefs.UnsafePath, match="symlink"):
        safefs.private_dir("py-abc", str(root))
    assert os.listdir(str(mine)) == []


def test_a_directory_open_to_others_is_refused(tmp_path):
    root = tmp_path / "gs"
    root.mkdir()
    os.chmod(str(root), 0o777)
    with pytest.raises(safefs.UnsafePath, match="open to other users"):
        safefs.private_dir("py-abc", str(root))


def test_a_file_in_place_of_the_directory_is_refused(tmp_path):
    (tmp_path / "gs").write_text("")
    with pytest.raises(safefs.UnsafePath, match="not a directory"):
        safefs.private_dir("py-abc", str(tmp_path / "gs"))


def test_a_parent_others_can_write_without_the_sticky_bit_is_refused(tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(str(parent), 0o777)
    with pytest.raises(safefs.UnsafePath, match="not sticky"):
        safefs.private_dir("py-abc", str(parent / "gs"))
    os.chmod(str(parent), 0o1777)  # /tmp's shape: fine
    assert safefs.private_dir("py-abc", str(parent / "gs"))


# -- output files ----------------------------------------------------------------------
def test_write_atomic_writes_and_replaces_a_regular_file_keeping_its_mode(tmp_path):
    out = tmp_path / "out.json"
    safefs.write_atomic(str(out), b"one")
    assert out.read_bytes() == b"one"
    os.chmod(str(out), 0o640)
    safefs.write_atomic(str(out), b"two")
    assert out.read_bytes() == b"two" and stat.S_IMODE(os.stat(str(out)).st_mode) == 0o640
    assert os.listdir(str(tmp_path)) == ["out.json"]


def test_a_new_file_gets_the_umask_mode_not_mkstemps_0600(tmp_path):
    out = tmp_path / "out.json"
    old = os.umask(0o027)
    try:
        safefs.write_atomic(str(out), b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(str(out)).st_mode) == 0o640


@pytest.mark.parametrize("kind", ["directory", "fifo", "socket", "device"])
def test_a_non_regular_target_is_refused_and_left_as_it_was(tmp_path, kind):
    target = tmp_path / "target"
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(str(target))
    elif kind == "socket":
        import socket
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(target))
        s.close()
    else:
        target = "/dev/null"
    before = os.lstat(str(target))
    with pytest.raises(safefs.UnsafePath, match="not replacing it"):
        safefs.write_atomic(str(target), b"{}")
    after = os.lstat(str(target))
    assert (before.st_mode, before.st_ino, before.st_rdev) == (after.st_mode, after.st_ino, after.st_rdev)
    assert sorted(os.listdir(str(tmp_path))) == ([] if kind == "device" else ["target"])


def test_a_symlink_of_ours_is_followed_to_its_regular_file(tmp_path):
    real = tmp_path / "runs" / "42.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to("runs/42.json")
    assert safefs.write_atomic(str(link), b"new") == str(real)
    assert os.path.islink(str(link)) and real.read_text() == "new"


def test_a_symlink_to_a_device_is_refused(tmp_path):
    link = tmp_path / "stdout"
    link.symlink_to("/dev/null")
    with pytest.raises(safefs.UnsafePath, match="device"):
        safefs.write_atomic(str(link), b"{}")
    assert os.readlink(str(link)) == "/dev/null"


@as_root
def test_a_symlink_planted_by_another_user_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    os.chmod(str(shared), 0o1777)
    planted = shared / "out.json"
    planted.symlink_to(victim)
    _give(planted)
    with pytest.raises(safefs.UnsafePath, match="uid 65534"):
        safefs.write_atomic(str(planted), b"{}")
    assert victim.read_text() == "precious" and os.listdir(str(shared)) == ["out.json"]


@as_root
def test_a_planted_predictable_temp_name_changes_nothing(tmp_path):
    # before: FILE.tmp was opened and written through; now the temp name is random (mkstemp)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out.json"
    planted = tmp_path / "out.json.tmp"
    planted.symlink_to(victim)
    _give(planted)
    safefs.write_atomic(str(out), b"{}")
    assert victim.read_text() == "precious" and out.read_bytes() == b"{}"
    assert sorted(os.listdir(str(tmp_path))) == ["out.json", "out.json.tmp", "victim"]


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    # RLIMIT_FSIZE makes the write fail as a full filesystem would (EFBIG; Python ignores SIGXFSZ)
    code = ("import resource, sys; from graphsignal import safefs\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
            "try:\n    safefs.write_atomic(sys.argv[1], b'x' * 100000)\n"
            "except OSError as e:\n    print(type(e).__name__, e.errno)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.json")], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["OSError", "27"], out  # EFBIG
    assert os.listdir(str(tmp_path)) == []


@as_root
@pytest.mark.parametrize("level", [1, 2])
def test_a_temp_directory_below_another_users_directory_is_refused(tmp_path, level):
    # before: a parent (or grandparent) of uid 65534 passed the mode check, and its owner could rename our
    # private directory away after the check and put one with a sitecustomize.py in its place
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    _give(theirs)
    tmpdir = theirs if level == 1 else theirs / "sub"
    tmpdir.mkdir(exist_ok=True, mode=0o755)
    with pytest.raises(safefs.UnsafePath, match="belongs to uid 65534"):
        safefs.private_dir("py-abc", str(tmpdir / "gs"))
    assert not (tmpdir / "gs").exists()


def test_the_private_root_is_reached_by_its_real_path(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    d = safefs.private_dir("py-abc", str(link / "gs"))
    assert d == str(real / "gs" / "py-abc")  # what goes on PYTHONPATH never passes through a symlink


@pytest.mark.parametrize("target", ["/dev/stderr", "/dev/stdout", "/proc/self/fd/2", "/dev/fd/1"])
def test_a_file_descriptor_is_never_a_target_even_when_it_points_to_a_regular_file(tmp_path, target):
    # before: --output /dev/stderr with 2>run.log renamed the payload onto run.log
    log = tmp_path / "run.log"
    code = ("import sys; from graphsignal import safefs\n"
            "try:\n    safefs.write_atomic(sys.argv[1], b'{}')\n"
            "except safefs.UnsafePath as e:\n    print('refused:', e)\n")
    with open(str(log), "wb") as f:  # stdout and stderr both go to the log, as with 2>run.log
        out = subprocess.run([sys.executable, "-c", code, target], stdout=f, stderr=f, timeout=60)
    assert out.returncode == 0
    text = log.read_text()
    assert "refused:" in text and "file descriptor" in text, text
    assert os.listdir(str(tmp_path)) == ["run.log"]


@as_root
def test_another_users_file_lends_the_output_no_mode(tmp_path):
    # before: a 04777 file of uid 65534 in a shared directory made root's payload setuid and world-writable
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(str(shared), 0o1777)
    out = shared / "res.json"
    out.write_text("x")
    _give(out)
    os.chmod(str(out), 0o4777)
    old = os.umask(0o022)
    try:
        safefs.write_atomic(str(out), b"{}")
    finally:
        os.umask(old)
    st = os.stat(str(out))
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644 and out.read_bytes() == b"{}"


def test_our_own_files_mode_is_kept_without_setuid_bits(tmp_path):
    out = tmp_path / "res.json"
    out.write_text("x")
    os.chmod(str(out), 0o4751)
    safefs.write_atomic(str(out), b"{}")
    assert stat.S_IMODE(os.stat(str(out)).st_mode) == 0o751
