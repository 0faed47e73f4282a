//! Writing to standard output as Unix tools do: when the reader goes away
//! (`gantry builds | head -1`), the command ends quietly with status 0
//! instead of panicking on a broken pipe. Every client verb prints with
//! [`outln!`](crate::outln) and [`out!`](crate::out).

use std::io::Write as _;

/// Writes `args` to standard output; a closed pipe ends the process with
/// status 0, any other write error with a one-line message and status 2.
pub fn write_out(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
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
