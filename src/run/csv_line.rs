//! CSV lines built digit by digit in one reused buffer.
//!
//! A 100k-request `--out` writes about three million numbers. Through `core::fmt` (and a
//! `String` per time) that was three quarters of the run (issue 14); writing the digits
//! directly gives the same bytes several times faster.

use std::io::{self, Write};

/// One CSV line at a time: cells are appended with their separating commas, and
/// [`CsvLine::finish`] ends the line. Lines gather in the buffer and go to the writer some
/// tens of kilobytes at a time (a write per line was a library copy each), so the last ones
/// go only with [`CsvLine::flush`].
#[derive(Default)]
pub struct CsvLine {
    buf: Vec<u8>,
    cells: usize,
}

/// Lines are written once the buffer holds this much.
const WRITE_BYTES: usize = 1 << 16;

impl CsvLine {
    fn separate(&mut self) {
        if self.cells > 0 {
            self.buf.push(b',');
        }
        self.cells += 1;
    }

    /// An unsigned integer, as `Display` writes it.
    pub fn uint(&mut self, value: u64) -> &mut Self {
        self.separate();
        push_uint(&mut self.buf, value);
        self
    }

    /// An integer or, for `None`, an empty cell.
    pub fn uint_or_empty(&mut self, value: Option<u64>) -> &mut Self {
        match value {
            Some(v) => self.uint(v),
            None => self.text(""),
        }
    }

    /// `value / 10^decimals` with every decimal: `fixed(1_500_000_001, 9)` is `1.500000001`.
    pub fn fixed(&mut self, value: u64, decimals: u32) -> &mut Self {
        self.separate();
        push_fixed(&mut self.buf, value, decimals);
        self
    }

    /// Text as it is (the caller quotes it where it must be).
    pub fn text(&mut self, text: &str) -> &mut Self {
        self.separate();
        self.buf.extend_from_slice(text.as_bytes());
        self
    }

    /// Ends the line with its newline and starts the next; writes the lines so far once they
    /// are many.
    pub fn finish(&mut self, w: &mut impl Write) -> io::Result<()> {
        self.buf.push(b'\n');
        self.cells = 0;
        if self.buf.len() >= WRITE_BYTES {
            self.flush(w)?;
        }
        Ok(())
    }

    /// Writes the lines not yet written. A CSV's writer calls it after its last line.
    pub fn flush(&mut self, w: &mut impl Write) -> io::Result<()> {
        debug_assert_eq!(self.cells, 0, "a line not finished");
        w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }
}

/// Appends the decimal digits of `value`.
pub fn push_uint(buf: &mut Vec<u8>, value: u64) {
    let digits = value.checked_ilog10().map_or(1, |log| log as usize + 1);
    push_digits(buf, value, digits);
}

/// Appends the low `digits` decimal digits of `value`, zero-padded, written last first straight
/// into the vector's spare capacity (a copy from a stack buffer was a library call per number,
/// and resizing first zero-filled the digits' place). Splitting the value into independent
/// chunks of eight digits was slower.
fn push_digits(buf: &mut Vec<u8>, value: u64, digits: usize) {
    buf.reserve(digits);
    let at = buf.len();
    let spare = &mut buf.spare_capacity_mut()[..digits];
    let mut value = value;
    let mut end = digits;
    while end >= 2 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        spare[end - 2].write(DIGIT_PAIRS[pair]);
        spare[end - 1].write(DIGIT_PAIRS[pair + 1]);
        end -= 2;
    }
    if end == 1 {
        spare[0].write(b'0' + (value % 10) as u8);
    }
    // SAFETY: the loop wrote every one of the `digits` bytes past `at`, within the capacity
    // reserved above.
    unsafe { buf.set_len(at + digits) };
}

/// "00", "01", …, "99": two digits per division by a constant.
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        pairs[2 * i] = b'0' + (i / 10) as u8;
        pairs[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    pairs
};

/// Appends `value / 10^decimals` with all `decimals` digits after the point (none and no point
/// when `decimals` is 0).
pub fn push_fixed(buf: &mut Vec<u8>, value: u64, decimals: u32) {
    // The outputs' two scales divide by a constant (a multiplication); any other by a division.
    let (whole, fraction) = match decimals {
        0 => return push_uint(buf, value),
        6 => (value / 1_000_000, value % 1_000_000),
        9 => (value / 1_000_000_000, value % 1_000_000_000),
        _ => {
            let scale = 10u64.pow(decimals);
            (value / scale, value % scale)
        }
    };
    push_uint(buf, whole);
    buf.push(b'.');
    push_digits(buf, fraction, decimals as usize);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn digits_are_those_of_format(value in any::<u64>(), decimals in 0u32..=9) {
            let mut buf = Vec::new();
            push_uint(&mut buf, value);
            prop_assert_eq!(String::from_utf8(buf).unwrap(), value.to_string());
            let mut buf = Vec::new();
            push_fixed(&mut buf, value, decimals);
            let scale = 10u64.pow(decimals);
            let expected = if decimals == 0 {
                value.to_string()
            } else {
                format!("{}.{:0width$}", value / scale, value % scale, width = decimals as usize)
            };
            prop_assert_eq!(String::from_utf8(buf).unwrap(), expected);
        }
    }

    #[test]
    fn a_line_separates_its_cells() {
        let mut out = Vec::new();
        let mut line = CsvLine::default();
        line.uint(0).uint_or_empty(None).fixed(7_280_001, 6).text("x").finish(&mut out).unwrap();
        line.uint(u64::MAX).finish(&mut out).unwrap();
        // Gathered until flushed.
        assert!(out.is_empty());
        line.flush(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "0,,7.280001,x\n18446744073709551615\n");
    }
}
