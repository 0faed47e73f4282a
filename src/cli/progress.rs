//! Progress bars of the CLI's transfers (uploads of inputs and images,
//! downloads of outputs): bytes and rate, drawn on stderr — never stdout —
//! and only for transfers over [`SHOWN_FROM`] bytes. When stderr is not a
//! terminal nothing is drawn at all (indicatif's `ProgressDrawTarget::stderr`).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use gantry_wire::runtime::ByteStream;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Transfers of at most this many bytes get no bar (1 MiB).
pub const SHOWN_FROM: u64 = 1024 * 1024;

/// Template of a transfer whose size is known.
const SIZED: &str =
    "{msg:>20} [{wide_bar}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {eta}";

/// Template of a transfer whose size is not known.
const UNSIZED: &str = "{spinner} {msg:>18} {binary_bytes} {binary_bytes_per_sec} {elapsed}";

/// The bars of one command's transfers, drawn together (concurrent uploads
/// each get a line).
#[derive(Clone)]
pub struct Transfers {
    multi: MultiProgress,
}

impl Transfers {
    /// Bars drawn on stderr, if it is a terminal.
    pub fn stderr() -> Self {
        Transfers {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
        }
    }

    /// Bars never drawn.
    #[cfg(test)]
    pub fn hidden() -> Self {
        Transfers {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
        }
    }

    /// `body`, counted on a bar labelled `label` as it is read. `total`, if
    /// known, is how many bytes it will yield. The bar appears once the
    /// transfer is known to exceed [`SHOWN_FROM`] bytes (from the start when
    /// `total` says so), and ends with the stream: finished at its end,
    /// abandoned on an error or when dropped early.
    pub fn track(&self, label: impl Into<String>, total: Option<u64>, body: ByteStream) -> Tracked {
        let template = if total.is_some() { SIZED } else { UNSIZED };
        let style = ProgressStyle::with_template(template)
            .expect("the progress templates are valid")
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::hidden())
            .with_style(style)
            .with_message(label.into());
        Tracked {
            inner: body,
            bar,
            multi: self.multi.clone(),
            total,
            shown: false,
            ended: false,
        }
    }
}

/// A byte stream counted on a progress bar (see [`Transfers::track`]).
pub struct Tracked {
    inner: ByteStream,
    bar: ProgressBar,
    multi: MultiProgress,
    total: Option<u64>,
    /// The bar was added to the drawn ones.
    shown: bool,
    /// The stream ended (or failed): the bar is final.
    ended: bool,
}

impl Tracked {
    /// Whether the bar is among the drawn ones (it is drawn only if stderr
    /// is a terminal).
    #[cfg(test)]
    pub fn shown(&self) -> bool {
        self.shown
    }

    /// Bytes counted so far.
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.bar.position()
    }

    /// Shows the bar once the transfer is big enough.
    fn show_if_big(&mut self) {
        let size = self.total.unwrap_or(0).max(self.bar.position());
        if !self.shown && size > SHOWN_FROM {
            self.bar = self.multi.add(self.bar.clone());
            self.bar
                .enable_steady_tick(std::time::Duration::from_millis(200));
            self.shown = true;
        }
    }

    /// Ends the bar: finished, or abandoned where it stopped.
    fn end(&mut self, finished: bool) {
        if self.ended {
            return;
        }
        self.ended = true;
        if finished {
            self.bar.finish();
        } else {
            self.bar.abandon();
        }
    }
}

impl Stream for Tracked {
    type Item = std::io::Result<bytes::Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.show_if_big();
        let item = this.inner.as_mut().poll_next(cx);
        match &item {
            Poll::Ready(Some(Ok(chunk))) => {
                this.bar.inc(chunk.len() as u64);
                this.show_if_big();
            }
            Poll::Ready(Some(Err(_))) => this.end(false),
            Poll::Ready(None) => this.end(true),
            Poll::Pending => {}
        }
        item
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.end(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::StreamExt;

    fn chunks(n: usize, size: usize) -> ByteStream {
        let items: Vec<std::io::Result<Bytes>> = (0..n)
            .map(|i| Ok(Bytes::from(vec![i as u8; size])))
            .collect();
        Box::pin(futures::stream::iter(items))
    }

    async fn drain(t: &mut Tracked) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(c) = t.next().await {
            out.extend_from_slice(&c.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn a_small_transfer_gets_no_bar_and_passes_its_bytes() {
        let mut t = Transfers::hidden().track("input small", None, chunks(16, 64 * 1024));
        let got = drain(&mut t).await;
        assert_eq!(got.len(), 1024 * 1024);
        assert!(got[..65536].iter().all(|b| *b == 0) && got[65536] == 1);
        assert_eq!(t.bytes(), 1024 * 1024);
        assert!(!t.shown(), "exactly 1 MiB is not over the threshold");
        assert!(t.bar.is_finished());
    }

    #[tokio::test]
    async fn an_unsized_transfer_shows_its_bar_once_over_a_mib() {
        let mut t = Transfers::hidden().track("output big", None, chunks(20, 64 * 1024));
        let mut seen = 0u64;
        while let Some(c) = t.next().await {
            seen += c.unwrap().len() as u64;
            assert_eq!(t.shown(), seen > SHOWN_FROM, "after {seen} bytes");
        }
        assert_eq!(t.bytes(), 20 * 64 * 1024);
        assert!(t.bar.is_finished());
    }

    #[tokio::test]
    async fn a_sized_transfer_shows_its_bar_from_the_start() {
        let total = 2 * 1024 * 1024;
        let mut t = Transfers::hidden().track("image", Some(total), chunks(32, 64 * 1024));
        let first = t.next().await.unwrap().unwrap();
        assert_eq!(first.len(), 64 * 1024);
        assert!(t.shown(), "2 MiB announced");
        drain(&mut t).await;
        assert_eq!(t.bytes(), total);
    }

    #[tokio::test]
    async fn a_failing_transfer_abandons_its_bar_and_passes_the_error() {
        let items: Vec<std::io::Result<Bytes>> = vec![
            Ok(Bytes::from(vec![1u8; 2 << 20])),
            Err(std::io::Error::other("connection reset")),
        ];
        let mut t =
            Transfers::hidden().track("output", None, Box::pin(futures::stream::iter(items)));
        assert!(t.next().await.unwrap().is_ok());
        let err = t.next().await.unwrap().unwrap_err();
        assert_eq!(err.to_string(), "connection reset");
        assert!(t.shown());
        assert!(t.ended, "the bar is final");
        assert_eq!(t.bytes(), 2 << 20);
    }
}
