"""A log directory that can be frozen on demand: the stand-in for a hung NFS or Lustre mount.

    python freezefs.py BACKING MOUNTPOINT FLAG

mounts a pass-through of BACKING at MOUNTPOINT (fusepy, libfuse2). While the file FLAG exists,
every call that opens, creates, writes, renames, removes or changes anything under MOUNTPOINT
waits in this server, so the process that made it waits in the kernel, as it would on a mount
whose server stopped answering. Looking (stat, readdir) still answers. Remove FLAG and the
waiting calls go on. Prints `mounted` on stdout once the mount answers. Used by
tests/hardening_frozen.rs.
"""

import errno
import os
import sys
import threading
import time

from fuse import FUSE, FuseOSError, Operations

BACKING, MOUNTPOINT, FLAG = sys.argv[1], sys.argv[2], sys.argv[3]


def hold():
    """Wait while the flag file exists."""
    while os.path.exists(FLAG):
        time.sleep(0.02)


def held(fn):
    def wrapper(self, *args):
        hold()
        try:
            return fn(self, *args)
        except OSError as e:
            raise FuseOSError(e.errno or errno.EIO)

    return wrapper


def plain(fn):
    def wrapper(self, *args):
        try:
            return fn(self, *args)
        except OSError as e:
            raise FuseOSError(e.errno or errno.EIO)

    return wrapper


class Freezable(Operations):
    def real(self, path):
        return os.path.join(BACKING, path.lstrip("/"))

    @plain
    def getattr(self, path, fh=None):
        st = os.lstat(self.real(path))
        keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime", "st_ctime")
        return {k: getattr(st, k) for k in keys}

    @plain
    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self.real(path))

    @plain
    def readlink(self, path):
        return os.readlink(self.real(path))

    @plain
    def statfs(self, path):
        st = os.statvfs(self.real(path))
        keys = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")
        return {k: getattr(st, k) for k in keys}

    @plain
    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    @plain
    def release(self, path, fh):
        os.close(fh)
        return 0

    def flush(self, path, fh):
        return 0

    @held
    def open(self, path, flags):
        return os.open(self.real(path), flags)

    @held
    def create(self, path, mode, fi=None):
        return os.open(self.real(path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)

    @held
    def write(self, path, data, offset, fh):
        # `<flag>.slow` present: every write takes 0.5 ms more (a slow file system, not a stuck one).
        if os.path.exists(FLAG + ".slow"):
            time.sleep(0.0005)
        return os.pwrite(fh, data, offset)

    @held
    def truncate(self, path, length, fh=None):
        os.truncate(self.real(path), length)

    @held
    def fsync(self, path, datasync, fh):
        os.fsync(fh)
        return 0

    @held
    def mkdir(self, path, mode):
        os.mkdir(self.real(path), mode)

    @held
    def rmdir(self, path):
        os.rmdir(self.real(path))

    @held
    def unlink(self, path):
        os.unlink(self.real(path))

    @held
    def rename(self, old, new):
        os.rename(self.real(old), self.real(new))

    @held
    def symlink(self, target, source):
        os.symlink(source, self.real(target))

    @held
    def chmod(self, path, mode):
        os.chmod(self.real(path), mode)

    @held
    def chown(self, path, uid, gid):
        os.chown(self.real(path), uid, gid)

    @held
    def utimens(self, path, times=None):
        os.utime(self.real(path), times)


def announce(under):
    # The mount answers once its root is the FUSE file system, not the directory under it.
    for _ in range(500):
        if os.stat(MOUNTPOINT).st_dev != under:
            break
        time.sleep(0.01)
    print("mounted", flush=True)


if __name__ == "__main__":
    threading.Thread(target=announce, args=(os.stat(MOUNTPOINT).st_dev,), daemon=True).start()
    FUSE(Freezable(), MOUNTPOINT, foreground=True, nothreads=False)
