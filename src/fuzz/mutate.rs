//! Byte-level mutations of an input, biased towards what breaks parsers of text formats:
//! numbers swapped for extreme ones, separators and quotes inserted, pieces of other inputs
//! spliced in, lines duplicated or cut.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// Numbers that make size arithmetic, samplers and allocations misbehave.
const INTERESTING_NUMBERS: &[&str] = &[
    "0", "-1", "1", "2", "-0", "0.0", "1e308", "-1e308", "1e-320", "1e999", "NaN", "nan", "inf", "-inf", "Infinity",
    "255", "256", "65535", "65536", "2147483647", "2147483648", "4294967295", "4294967296", "9007199254740993",
    "18446744073709551615", "18446744073709551616", "340282366920938463463374607431768211456", "0.5", "1.5",
    "-9223372036854775808", "99999999999999999999999999", "\"\"", "null", "true", "[]", "{}",
];

/// Bytes that change a text format's structure.
const STRUCTURAL: &[u8] = b"\n\r,;:=\"'[]{}#\\ \t.-+e0\x00\xff";

/// Longest input a mutation may produce: the targets must handle big inputs, but a fuzzer that
/// grows without bound spends its time copying.
pub const INPUT_BYTES_MAX: usize = 1 << 16;

/// One to eight random mutations of `input`, some splicing from `other` (another corpus entry).
pub fn mutate(input: &[u8], other: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.random_range(1..=8) {
        mutate_once(&mut out, other, rng);
    }
    out.truncate(INPUT_BYTES_MAX);
    out
}

fn mutate_once(out: &mut Vec<u8>, other: &[u8], rng: &mut ChaCha8Rng) {
    let at = |rng: &mut dyn FnMut(usize) -> usize, len: usize| rng(len + 1);
    let mut pick = |n: usize| if n == 0 { 0 } else { rng.random_range(0..n) };
    match pick(9) {
        // Flip one bit.
        0 if !out.is_empty() => {
            let i = pick(out.len());
            out[i] ^= 1 << pick(8);
        }
        // A structural byte, inserted or overwritten.
        1 => {
            let b = STRUCTURAL[pick(STRUCTURAL.len())];
            let i = at(&mut pick, out.len());
            if i < out.len() && pick(2) == 0 {
                out[i] = b;
            } else {
                out.insert(i, b);
            }
        }
        // A number (the digits around a random point) replaced by an interesting one.
        2 => {
            let number = INTERESTING_NUMBERS[pick(INTERESTING_NUMBERS.len())].as_bytes();
            match find_number(out, pick(out.len().max(1))) {
                Some((start, end)) => {
                    out.splice(start..end, number.iter().copied());
                }
                None => {
                    let i = at(&mut pick, out.len());
                    out.splice(i..i, number.iter().copied());
                }
            }
        }
        // A range deleted.
        3 if !out.is_empty() => {
            let start = pick(out.len());
            let end = (start + 1 + pick(64)).min(out.len());
            out.drain(start..end);
        }
        // A range duplicated in place (a line or a key repeated).
        4 if !out.is_empty() => {
            let start = pick(out.len());
            let end = (start + 1 + pick(256)).min(out.len());
            let copy: Vec<u8> = out[start..end].to_vec();
            let i = at(&mut pick, out.len());
            out.splice(i..i, copy);
        }
        // A piece of another input spliced in.
        5 if !other.is_empty() => {
            let start = pick(other.len());
            let end = (start + 1 + pick(512)).min(other.len());
            let i = at(&mut pick, out.len());
            out.splice(i..i, other[start..end].iter().copied());
        }
        // Cut short.
        6 if !out.is_empty() => {
            let len = pick(out.len());
            out.truncate(len);
        }
        // A random byte.
        7 if !out.is_empty() => {
            let i = pick(out.len());
            out[i] = pick(256) as u8;
        }
        // A whole line repeated many times (huge tables, many rows).
        _ => {
            let lines: Vec<usize> = out.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i).collect();
            if lines.len() >= 2 {
                let k = pick(lines.len() - 1);
                let line = out[lines[k] + 1..=lines[k + 1]].to_vec();
                let times = 1 + pick(64);
                let i = lines[k + 1] + 1;
                out.splice(i..i, line.iter().copied().cycle().take(line.len() * times));
            }
        }
    }
}

/// The run of number characters around `i`, if `i` is in one.
fn find_number(bytes: &[u8], i: usize) -> Option<(usize, usize)> {
    let is_number = |b: u8| b.is_ascii_digit() || b == b'.' || b == b'-' || b == b'e' || b == b'E' || b == b'+';
    let first_digit = bytes.iter().skip(i).position(|b| b.is_ascii_digit())? + i;
    let start = bytes[..first_digit].iter().rposition(|&b| !is_number(b)).map_or(0, |p| p + 1);
    let end = bytes[first_digit..].iter().position(|&b| !is_number(b)).map_or(bytes.len(), |p| first_digit + p);
    Some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    #[test]
    fn mutations_are_deterministic_bounded_and_varied() {
        let input = b"num_prompts = 1000\nrate = 2.5\n[model]\npreset = \"x\"\n".as_slice();
        let run = || {
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            (0..500).map(|_| mutate(input, b"other text 42", &mut rng)).collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.iter().all(|m| m.len() <= INPUT_BYTES_MAX));
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert!(distinct.len() > 400, "{}", distinct.len());
        assert!(a.iter().any(|m| m.windows(4).any(|w| w == b"1e30")), "numbers are swapped for extreme ones");
    }

    #[test]
    fn numbers_are_found_whole() {
        assert_eq!(find_number(b"a = -12.5e3\n", 0), Some((4, 11)));
        assert_eq!(find_number(b"abc", 0), None);
    }
}
