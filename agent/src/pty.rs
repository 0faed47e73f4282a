//! Pseudo-terminals for processes that asked for a TTY.
//!
//! The agent opens a pty pair, keeps the master (non-blocking, registered
//! with tokio) and hands the slave to the child as its stdin, stdout, stderr
//! and controlling terminal ([`Pty::spawn`]: the child starts a new session).
//! Everything the process writes arrives on the master as one stream; what is
//! written to the master is the process's input; [`Pty::resize`] sets the
//! window size with `TIOCSWINSZ`, after which the kernel sends `SIGWINCH` to
//! the terminal's foreground process group.
//!
//! Under runc the child is `runc exec`/`runc run` with `terminal: true`: runc
//! makes the container's own pty, puts ours in raw mode, copies between the
//! two and, on `SIGWINCH`, copies our size onto the inner one. So a resize
//! here reaches the process in the container, and runc's exit status is
//! still the process's.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use gantry_wire::spec::WindowSize;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The master side of a pseudo-terminal.
pub struct Pty {
    /// The master, non-blocking, registered with the runtime it was opened on.
    master: AsyncFd<OwnedFd>,
}

/// Fails with the last OS error when `ret` is negative.
fn check(ret: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if ret < 0 {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    } else {
        Ok(ret)
    }
}

/// The `winsize` of a window size.
fn winsize(size: WindowSize) -> libc::winsize {
    libc::winsize {
        ws_row: size.rows,
        ws_col: size.columns,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

impl Pty {
    /// Opens a pty pair of `size`; returns the master and the slave. Must be
    /// called on a tokio runtime (the master is registered with it).
    pub fn open(size: WindowSize) -> io::Result<(Pty, OwnedFd)> {
        // SAFETY: plain libc calls on descriptors this function owns; every
        // returned descriptor is wrapped in an OwnedFd at once.
        unsafe {
            let master = check(
                libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC),
                "posix_openpt",
            )?;
            let master = OwnedFd::from_raw_fd(master);
            let fd = master.as_raw_fd();
            check(libc::grantpt(fd), "grantpt")?;
            check(libc::unlockpt(fd), "unlockpt")?;
            let mut name = [0 as libc::c_char; 128];
            let ret = libc::ptsname_r(fd, name.as_mut_ptr(), name.len());
            if ret != 0 {
                return Err(io::Error::from_raw_os_error(ret));
            }
            let slave = check(
                libc::open(
                    CStr::from_ptr(name.as_ptr()).as_ptr(),
                    libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
                ),
                "opening the pty slave",
            )?;
            let slave = OwnedFd::from_raw_fd(slave);
            let ws = winsize(size);
            check(
                libc::ioctl(fd, libc::TIOCSWINSZ, &ws),
                "setting the window size",
            )?;
            let flags = check(libc::fcntl(fd, libc::F_GETFL), "fcntl")?;
            check(
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK),
                "fcntl",
            )?;
            // The OwnedFd is moved into the AsyncFd and stays open with it.
            let master =
                AsyncFd::register_with_interest(master, Interest::READABLE | Interest::WRITABLE)?;
            Ok((Pty { master }, slave))
        }
    }

    /// Gives `cmd` the slave as stdin, stdout, stderr and controlling
    /// terminal, in a new session (so the pty's foreground process group is
    /// the child's and it receives `SIGWINCH`). Do not also set a process
    /// group on `cmd`: a group leader cannot start a session.
    pub fn attach_to(cmd: &mut tokio::process::Command, slave: &OwnedFd) -> io::Result<()> {
        cmd.stdin(slave.try_clone()?)
            .stdout(slave.try_clone()?)
            .stderr(slave.try_clone()?);
        // SAFETY: setsid and ioctl are async-signal-safe; nothing else runs
        // between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }

    /// Sets the window size; the kernel signals the foreground process group.
    pub fn resize(&self, size: WindowSize) -> io::Result<()> {
        let ws = winsize(size);
        // SAFETY: TIOCSWINSZ reads a winsize from the pointer, which is valid.
        check(
            unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
            "setting the window size",
        )
        .map(drop)
    }

    /// The current window size.
    pub fn size(&self) -> io::Result<WindowSize> {
        let mut ws = winsize(WindowSize {
            columns: 0,
            rows: 0,
        });
        // SAFETY: TIOCGWINSZ writes a winsize to the pointer, which is valid.
        check(
            unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) },
            "reading the window size",
        )?;
        Ok(WindowSize {
            columns: ws.ws_col,
            rows: ws.ws_row,
        })
    }

    /// Reads output; `Ok(0)` once no process holds the slave any more (the
    /// kernel answers `EIO` then).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.master.readable().await?;
            match guard.try_io(|fd| raw_read(fd.as_raw_fd(), buf)) {
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `data` as the process's input.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.master.writable().await?;
            match guard.try_io(|fd| raw_write(fd.as_raw_fd(), data)) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the terminal's process has ended",
                    ))
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }
}

/// `read(2)` into `buf`.
fn raw_read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: the buffer is valid for writes of its length.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `write(2)` from `data`.
fn raw_write(fd: RawFd, data: &[u8]) -> io::Result<usize> {
    // SAFETY: the buffer is valid for reads of its length.
    let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_on_the_pty_sees_a_terminal_of_the_given_size_and_its_input() {
        let (pty, slave) = Pty::open(WindowSize {
            columns: 80,
            rows: 24,
        })
        .unwrap();
        let mut cmd = tokio::process::Command::new("sh");
        cmd.args([
            "-c",
            "[ -t 0 ] && echo tty; stty size; read line; echo got $line",
        ]);
        Pty::attach_to(&mut cmd, &slave).unwrap();
        let mut child = cmd.spawn().unwrap();
        drop(cmd);
        drop(slave);
        pty.write_all(b"hello\n").await.unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let n = pty.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&out).replace('\r', "");
        assert!(text.contains("tty\n"), "{text:?}");
        assert!(text.contains("24 80\n"), "{text:?}");
        assert!(text.contains("got hello\n"), "{text:?}");
        assert!(child.wait().await.unwrap().success());
        pty.resize(WindowSize {
            columns: 100,
            rows: 30,
        })
        .unwrap();
        assert_eq!(
            pty.size().unwrap(),
            WindowSize {
                columns: 100,
                rows: 30
            }
        );
    }
}
