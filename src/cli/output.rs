//! Writing to standard output as Unix tools do: when the reader goes away
//! (`gantry builds | head -1`), the command ends quietly with status 0
//! instead of failing on a broken pipe. Every client verb prints with
//! [`outln!`](crate::outln) and [`out!`](crate::out), and writes bytes
//! (a build's log, completions) with [`write_bytes`]; `gantry hijack`,
//! which must restore the terminal first, ends through
//! [`is_closed_pipe`].

use std::io::Write as _;

/// Writes `args` to standard output; a closed pipe ends the process with
/// status 0, any other write error with a one-line message and status 2.
pub fn write_out(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args);
    ended_on(written);
}

/// Writes `bytes` to standard output and flushes them (a log streamed as
/// it comes); a closed pipe ends the process with status 0, as
/// [`write_out`].
pub fn write_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let written = out.write_all(bytes).and_then(|()| out.flush());
    ended_on(written);
}

/// Whether `e` is the reader of a pipe having gone away.
pub fn is_closed_pipe(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

/// Ends the process after a failed write: quietly with status 0 when the
/// reader went away, else with a line and status 2.
fn ended_on(written: std::io::Result<()>) {
    if let Err(e) = written {
        if is_closed_pipe(&e) {
            std::process::exit(0);
        }
        eprintln!("error: writing to standard output: {e}");
        std::process::exit(2);
    }
}

/// `println!` for the CLI's standard output: a closed pipe ends the process
/// quietly (see [`write_out`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::cli::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for the CLI's standard output (see [`outln!`](crate::outln)).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::write_out(format_args!($($arg)*))
    };
}
