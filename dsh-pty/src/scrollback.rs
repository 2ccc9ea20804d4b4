//! A bounded record of a session's raw output, addressed by absolute offsets.
//!
//! Every byte a session ever produced has an absolute offset counted from the
//! start of the session. The scrollback keeps the most recent bytes within two
//! bounds (bytes and line breaks) and can be paged *backwards* from any offset.
//! Asking for bytes that were dropped is an explicit error, never a silent
//! substitute.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

/// The bounds of a [`Scrollback`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScrollbackLimits {
    /// The most bytes held: the output retained plus [`CHUNK_COST`] for
    /// each chunk it is kept in beyond the first, so the bound holds for
    /// memory, not only for payload. At least 1.
    pub max_bytes: usize,
    /// The most line breaks (`\n`) retained; the partial line after the last
    /// break is kept as well. At least 1.
    pub max_lines: usize,
}

impl Default for ScrollbackLimits {
    /// 4 MiB and 10,000 lines.
    fn default() -> Self {
        ScrollbackLimits {
            max_bytes: 4 * 1024 * 1024,
            max_lines: 10_000,
        }
    }
}

/// Why a scrollback request could not be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ScrollbackError {
    /// The requested bytes were dropped to keep the scrollback within its bounds.
    #[error(
        "offset {requested} is no longer in the scrollback: bytes before offset {earliest} were dropped"
    )]
    Dropped {
        /// The offset asked for.
        requested: u64,
        /// The earliest offset still retained.
        earliest: u64,
    },
    /// The requested offset lies beyond what the session has produced so far.
    #[error("offset {requested} is beyond the end of the output (offset {end})")]
    Beyond {
        /// The offset asked for.
        requested: u64,
        /// The offset one past the last byte produced so far.
        end: u64,
    },
}

/// One page of scrollback: the bytes `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Absolute offset of the first byte of the page.
    pub start: u64,
    /// Absolute offset one past the last byte of the page.
    pub end: u64,
    /// The raw bytes.
    pub data: Vec<u8>,
    /// `true` when output before `start` existed but was dropped, so this page
    /// is the earliest that can ever be read.
    pub dropped_before: bool,
}

impl Page {
    /// `true` when there is retained output before this page (page on with
    /// `page_before(page.start, ..)`).
    pub fn has_more_before(&self) -> bool {
        self.start > 0 && !self.dropped_before
    }
}

/// Reads shorter than this join the previous chunk while it is this short.
const SMALL_CHUNK: usize = 512;

/// What keeping one chunk costs beyond its payload, counted against
/// [`ScrollbackLimits::max_bytes`]: its entry in the queue, the `Bytes`
/// handle and the allocator's header.
pub const CHUNK_COST: usize = 64;

#[derive(Debug)]
struct Chunk {
    data: Bytes,
    newlines: usize,
}

impl Chunk {
    fn new(data: Bytes) -> Self {
        let newlines = memchr::memchr_iter(b'\n', &data).count();
        Chunk { data, newlines }
    }
}

/// The scrollback itself (single-threaded; sessions share it through a
/// [`ScrollbackHandle`]).
///
/// ```
/// use dsh_pty::{Scrollback, ScrollbackLimits};
/// let mut sb = Scrollback::new(ScrollbackLimits { max_bytes: 1024, max_lines: 2 });
/// sb.push(b"one\ntwo\nthree\n");
/// // Only two line breaks are kept: "one\n" was dropped.
/// assert_eq!(sb.start_offset(), 4);
/// let page = sb.page_before(sb.end_offset(), 1, 1024).unwrap();
/// assert_eq!(page.data, b"three\n");
/// let page = sb.page_before(page.start, 10, 1024).unwrap();
/// assert_eq!(page.data, b"two\n");
/// assert!(page.dropped_before);
/// assert!(sb.page_before(2, 1, 1024).is_err());
/// ```
#[derive(Debug)]
pub struct Scrollback {
    chunks: VecDeque<Chunk>,
    start: u64,
    end: u64,
    bytes: usize,
    newlines: usize,
    limits: ScrollbackLimits,
}

impl Scrollback {
    /// An empty scrollback with the given bounds (each raised to at least 1).
    pub fn new(limits: ScrollbackLimits) -> Self {
        Scrollback {
            chunks: VecDeque::new(),
            start: 0,
            end: 0,
            bytes: 0,
            newlines: 0,
            limits: ScrollbackLimits {
                max_bytes: limits.max_bytes.max(1),
                max_lines: limits.max_lines.max(1),
            },
        }
    }

    /// Appends output, dropping the oldest bytes beyond the bounds.
    pub fn push(&mut self, data: &[u8]) {
        self.push_bytes(Bytes::copy_from_slice(data));
    }

    /// Appends output without copying it, dropping the oldest bytes beyond the bounds.
    pub fn push_bytes(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        self.end += data.len() as u64;
        // Small reads (a byte at a time, say) join the last chunk while it is
        // small, so per-chunk bookkeeping (about 100 bytes each) stays a
        // fraction of what is kept instead of a multiple of it.
        if data.len() < SMALL_CHUNK
            && let Some(last) = self.chunks.back_mut()
            && last.data.len() + data.len() <= SMALL_CHUNK
        {
            let mut joined = Vec::with_capacity(last.data.len() + data.len());
            joined.extend_from_slice(&last.data);
            joined.extend_from_slice(&data);
            let added = memchr::memchr_iter(b'\n', &data).count();
            last.data = Bytes::from(joined);
            last.newlines += added;
            self.bytes += data.len();
            self.newlines += added;
            self.enforce_bounds();
            return;
        }
        let chunk = Chunk::new(data);
        self.bytes += chunk.data.len();
        self.newlines += chunk.newlines;
        self.chunks.push_back(chunk);
        self.enforce_bounds();
    }

    /// Absolute offset of the earliest retained byte (0 until something is dropped).
    pub fn start_offset(&self) -> u64 {
        self.start
    }

    /// Absolute offset one past the last byte ever pushed.
    pub fn end_offset(&self) -> u64 {
        self.end
    }

    /// Number of bytes retained.
    pub fn retained_bytes(&self) -> usize {
        self.bytes
    }

    /// The bounds.
    pub fn limits(&self) -> ScrollbackLimits {
        self.limits
    }

    /// The page that ends at `end`: at most `max_lines` lines (a line ends
    /// with `\n` or at `end`) and at most `max_bytes` bytes.
    ///
    /// Fails with [`ScrollbackError::Dropped`] when `end` is at or before the
    /// earliest retained offset while output before it was dropped, and with
    /// [`ScrollbackError::Beyond`] when `end` is past the end of the output.
    pub fn page_before(
        &self,
        end: u64,
        max_lines: usize,
        max_bytes: usize,
    ) -> Result<Page, ScrollbackError> {
        self.check(end)?;
        if end == self.start && self.start > 0 {
            return Err(ScrollbackError::Dropped {
                requested: end,
                earliest: self.start,
            });
        }
        let lower = self.start.max(end.saturating_sub(max_bytes as u64));
        let mut start = lower;
        if max_lines > 0 {
            // Walk backwards over the retained segments in [lower, end),
            // counting line breaks that close an earlier line.
            let mut lines = 0usize;
            'scan: for (seg_start, seg) in self.segments_rev(lower, end) {
                let mut hay = seg;
                while let Some(i) = memchr::memrchr(b'\n', hay) {
                    let abs = seg_start + i as u64;
                    hay = &hay[..i];
                    if abs + 1 == end {
                        continue; // the break that ends the page's last line
                    }
                    lines += 1;
                    if lines == max_lines {
                        start = abs + 1;
                        break 'scan;
                    }
                }
            }
        } else {
            start = end;
        }
        let data = self.copy_range(start, end);
        Ok(Page {
            start,
            end,
            data,
            dropped_before: start == self.start && self.start > 0,
        })
    }

    /// The exact bytes `[start, end)`.
    ///
    /// Fails with [`ScrollbackError::Dropped`] when any of them was dropped and
    /// with [`ScrollbackError::Beyond`] when `end` is past the end of the output.
    pub fn read_range(&self, start: u64, end: u64) -> Result<Vec<u8>, ScrollbackError> {
        self.check(end)?;
        if start < self.start {
            return Err(ScrollbackError::Dropped {
                requested: start,
                earliest: self.start,
            });
        }
        if start >= end {
            return Ok(Vec::new());
        }
        Ok(self.copy_range(start, end))
    }

    fn check(&self, end: u64) -> Result<(), ScrollbackError> {
        if end > self.end {
            return Err(ScrollbackError::Beyond {
                requested: end,
                end: self.end,
            });
        }
        if end < self.start {
            return Err(ScrollbackError::Dropped {
                requested: end,
                earliest: self.start,
            });
        }
        Ok(())
    }

    /// Retained segments clipped to `[lo, hi)`, last first, with their absolute start.
    fn segments_rev(&self, lo: u64, hi: u64) -> impl Iterator<Item = (u64, &[u8])> {
        let mut seg_end = self.end;
        self.chunks.iter().rev().filter_map(move |chunk| {
            let len = chunk.data.len() as u64;
            let seg_start = seg_end - len;
            let this_end = seg_end;
            seg_end = seg_start;
            let a = seg_start.max(lo);
            let b = this_end.min(hi);
            (a < b).then(|| {
                let off = (a - seg_start) as usize;
                let to = (b - seg_start) as usize;
                (a, &chunk.data[off..to])
            })
        })
    }

    fn copy_range(&self, start: u64, end: u64) -> Vec<u8> {
        let mut parts: Vec<&[u8]> = self.segments_rev(start, end).map(|(_, s)| s).collect();
        parts.reverse();
        parts.concat()
    }

    /// What the retained output costs against the byte bound.
    fn held(&self) -> usize {
        self.bytes + self.chunks.len().saturating_sub(1) * CHUNK_COST
    }

    fn enforce_bounds(&mut self) {
        while self.held() > self.limits.max_bytes && !self.chunks.is_empty() {
            let excess = self.held() - self.limits.max_bytes;
            self.drop_front(excess);
        }
        while self.newlines > self.limits.max_lines {
            let excess = self.newlines - self.limits.max_lines;
            let Some(front) = self.chunks.front() else {
                break;
            };
            let cut = if front.newlines <= excess {
                front.data.len()
            } else {
                match memchr::memchr_iter(b'\n', &front.data).nth(excess - 1) {
                    Some(i) => i + 1,
                    None => front.data.len(),
                }
            };
            self.drop_front(cut);
        }
    }

    /// Drops up to `n` bytes from the front chunk (never more than that chunk).
    fn drop_front(&mut self, n: usize) {
        let Some(front) = self.chunks.front_mut() else {
            return;
        };
        if n >= front.data.len() {
            let len = front.data.len();
            let newlines = front.newlines;
            self.chunks.pop_front();
            self.bytes -= len;
            self.newlines -= newlines;
            self.start += len as u64;
            return;
        }
        let removed_newlines = memchr::memchr_iter(b'\n', &front.data[..n]).count();
        // Copy the rest so the dropped part's allocation is freed: memory stays
        // within the bound instead of pinning whole read buffers.
        front.data = Bytes::copy_from_slice(&front.data[n..]);
        front.newlines -= removed_newlines;
        self.bytes -= n;
        self.newlines -= removed_newlines;
        self.start += n as u64;
    }
}

/// A shared handle to a session's [`Scrollback`]. Cloning it is cheap.
#[derive(Debug, Clone)]
pub struct ScrollbackHandle {
    inner: Arc<Mutex<Scrollback>>,
}

impl ScrollbackHandle {
    /// A handle to a new, empty scrollback.
    pub fn new(limits: ScrollbackLimits) -> Self {
        ScrollbackHandle {
            inner: Arc::new(Mutex::new(Scrollback::new(limits))),
        }
    }

    /// Locks the scrollback for several reads in a row. Keep the guard short:
    /// the session's output pump waits on it.
    pub fn lock(&self) -> MutexGuard<'_, Scrollback> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// See [`Scrollback::page_before`].
    pub fn page_before(
        &self,
        end: u64,
        max_lines: usize,
        max_bytes: usize,
    ) -> Result<Page, ScrollbackError> {
        self.lock().page_before(end, max_lines, max_bytes)
    }

    /// See [`Scrollback::read_range`].
    pub fn read_range(&self, start: u64, end: u64) -> Result<Vec<u8>, ScrollbackError> {
        self.lock().read_range(start, end)
    }

    /// See [`Scrollback::end_offset`].
    pub fn end_offset(&self) -> u64 {
        self.lock().end_offset()
    }

    /// See [`Scrollback::start_offset`].
    pub fn start_offset(&self) -> u64 {
        self.lock().start_offset()
    }

    pub(crate) fn push_bytes(&self, data: Bytes) {
        self.lock().push_bytes(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(max_bytes: usize, max_lines: usize) -> ScrollbackLimits {
        ScrollbackLimits {
            max_bytes,
            max_lines,
        }
    }

    #[test]
    fn pages_back_line_by_line() {
        let mut sb = Scrollback::new(limits(1 << 20, 1000));
        sb.push(b"a\nbb\n");
        sb.push(b"ccc\ndd");
        let p = sb.page_before(sb.end_offset(), 2, 100).unwrap();
        assert_eq!(p.data, b"ccc\ndd");
        assert_eq!((p.start, p.end), (5, 11));
        assert!(p.has_more_before());
        let p = sb.page_before(p.start, 2, 100).unwrap();
        assert_eq!(p.data, b"a\nbb\n");
        assert_eq!(p.start, 0);
        assert!(!p.dropped_before);
        assert!(!p.has_more_before());
    }

    #[test]
    fn a_flood_of_tiny_reads_keeps_few_chunks() {
        let mut sb = Scrollback::new(limits(100_000, 100_000));
        let mut all = Vec::new();
        for i in 0..50_000u32 {
            let b = [b'a' + (i % 26) as u8];
            sb.push(&b);
            all.push(b[0]);
        }
        assert_eq!(sb.retained_bytes(), 50_000);
        assert!(
            sb.chunks.len() <= 50_000 / (SMALL_CHUNK / 2),
            "{}",
            sb.chunks.len()
        );
        let p = sb.page_before(sb.end_offset(), 1_000_000, 1000).unwrap();
        assert_eq!(p.data, &all[all.len() - 1000..]);
    }

    #[test]
    fn the_byte_bound_counts_what_chunks_cost() {
        // Reads that do not join (511 bytes, then 2): two chunks per 513
        // bytes of output. The bound holds for payload plus chunk costs.
        let max = 64 * 1024;
        let mut sb = Scrollback::new(limits(max, usize::MAX));
        for i in 0..2000 {
            sb.push(&if i % 2 == 0 {
                vec![b'x'; 511]
            } else {
                vec![b'y'; 2]
            });
            let held = sb.retained_bytes() + (sb.chunks.len() - 1) * CHUNK_COST;
            assert!(held <= max, "{held} held after {i} reads");
        }
        assert!(sb.retained_bytes() < max - 100 * CHUNK_COST);
        // The retained tail is still exactly the end of the output.
        let page = sb.page_before(sb.end_offset(), 1, 2).unwrap();
        assert_eq!(page.data, b"yy");
    }

    #[test]
    fn byte_bound_cuts_mid_line() {
        let mut sb = Scrollback::new(limits(1 << 20, 1000));
        sb.push(b"0123456789");
        let p = sb.page_before(10, 5, 4).unwrap();
        assert_eq!(p.data, b"6789");
        assert_eq!(p.start, 6);
    }

    #[test]
    fn dropped_and_beyond_are_explicit() {
        let mut sb = Scrollback::new(limits(8, 1000));
        sb.push(b"0123456789abcdef");
        assert_eq!(sb.start_offset(), 8);
        assert_eq!(sb.retained_bytes(), 8);
        assert_eq!(
            sb.page_before(7, 1, 100),
            Err(ScrollbackError::Dropped {
                requested: 7,
                earliest: 8
            })
        );
        assert_eq!(
            sb.page_before(8, 1, 100),
            Err(ScrollbackError::Dropped {
                requested: 8,
                earliest: 8
            })
        );
        assert_eq!(
            sb.read_range(17, 17),
            Err(ScrollbackError::Beyond {
                requested: 17,
                end: 16
            })
        );
        let p = sb.page_before(16, 10, 100).unwrap();
        assert_eq!(p.data, b"89abcdef");
        assert!(p.dropped_before);
    }

    #[test]
    fn empty_scrollback_gives_an_empty_first_page() {
        let sb = Scrollback::new(ScrollbackLimits::default());
        let p = sb.page_before(0, 10, 10).unwrap();
        assert!(p.data.is_empty());
        assert!(!p.dropped_before);
    }

    #[test]
    fn memory_stays_within_bound() {
        let mut sb = Scrollback::new(limits(1000, 100_000));
        for i in 0..10_000u32 {
            sb.push(format!("line {i} with some padding\n").as_bytes());
            assert!(sb.retained_bytes() <= 1000);
        }
        let total: usize = sb.chunks.iter().map(|c| c.data.len()).sum();
        assert_eq!(total, sb.retained_bytes());
    }

    proptest! {
        /// Whatever the chunking and bounds, the retained bytes are exactly the
        /// tail of everything pushed, and paging back from the end reassembles them.
        #[test]
        fn paging_reassembles_the_retained_tail(
            chunks in proptest::collection::vec(
                proptest::collection::vec(prop_oneof![Just(b'\n'), any::<u8>()], 0..50), 0..40),
            max_bytes in 1usize..300,
            max_lines in 1usize..30,
            page_lines in 1usize..5,
            page_bytes in 1usize..40,
        ) {
            let mut sb = Scrollback::new(limits(max_bytes, max_lines));
            let mut all = Vec::new();
            for c in &chunks {
                sb.push(c);
                all.extend_from_slice(c);
            }
            prop_assert_eq!(sb.end_offset(), all.len() as u64);
            prop_assert!(sb.retained_bytes() <= max_bytes);
            let retained = &all[sb.start_offset() as usize..];
            prop_assert!(memchr::memchr_iter(b'\n', retained).count() <= max_lines);
            prop_assert_eq!(sb.read_range(sb.start_offset(), sb.end_offset()).unwrap(), retained);

            let mut pages = Vec::new();
            let mut end = sb.end_offset();
            loop {
                match sb.page_before(end, page_lines, page_bytes) {
                    Ok(p) => {
                        prop_assert!(p.data.len() <= page_bytes);
                        prop_assert_eq!(p.end - p.start, p.data.len() as u64);
                        let last = p.start == sb.start_offset();
                        let done = p.start == end;
                        end = p.start;
                        pages.push(p.data);
                        if last || done { break; }
                    }
                    Err(ScrollbackError::Dropped { earliest, .. }) => {
                        prop_assert_eq!(earliest, sb.start_offset());
                        break;
                    }
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                }
            }
            pages.reverse();
            prop_assert_eq!(pages.concat(), retained);
        }
    }
}
