//! A profile's index in a compact binary form, for the profiles bundled into the binary: read in
//! well under a millisecond where parsing the CSV and building every curve took about 0.1 s of
//! CPU, which every `simulate`, fit evaluation and plan worker paid before its first event.
//!
//! The form holds what [`ProfileIndex`] holds, built by this crate's own code from the CSV
//! (`calibration/public/*.index`; `SERVESIM_BLESS=1 cargo test --lib bundled` writes them, and
//! the same test fails when one differs from its CSV), so a model priced from it gets the
//! same bits. A directory of keys is read at load; each GEMM curve and attention surface is a
//! slice decoded when first read.
//!
//! Layout, little-endian: the magic line; the peak (two `f64`); the [`ProfileFacts`]; the
//! sampling rows; the all-reduce and all-to-all curves; the GEMM directory (dtype, n, k, bytes)
//! and the attention directory (phase, dtype, heads, KV heads, head dim, uneven, bytes); then
//! the GEMM and attention values, in directory order. Names are length-prefixed strings, as
//! the CSV spells them.

use std::collections::BTreeMap;

use super::index::{AttentionKey, ProfileIndex};
use super::interpolate::{Curve, GemmCurve, Surface};
use super::lazy::LazyMap;
use super::{Profile, ProfileFacts, parse_phase, phase_name};
use crate::calibrate::backend::{Peak, SamplingMethod};
use crate::calibrate::grid::HeadConfig;
use crate::scenario::model::Dtype;

const MAGIC: &[u8] = b"servesim profile index 1\n";

/// The packed form of `profile`'s index and facts.
pub fn write(profile: &Profile) -> Vec<u8> {
    let index = ProfileIndex::new(profile);
    let facts = ProfileFacts::of(&profile.rows);
    let mut w = Writer(MAGIC.to_vec());
    w.f64(index.peak.flops_per_s);
    w.f64(index.peak.memory_bytes_per_s);
    w.u8(u8::from(facts.has_attention));
    w.len(facts.gemm_dtypes.len());
    for dtype in &facts.gemm_dtypes {
        w.name(dtype.name());
    }
    w.len(index.sampling.len());
    for (method, rows) in &index.sampling {
        w.name(method.name());
        w.len(rows.len());
        for &(vocab, ns_per_logit) in rows {
            w.u32(vocab);
            w.f64(ns_per_logit);
        }
    }
    for curves in [&index.allreduce, &index.alltoall] {
        w.len(curves.len());
        for (&gpus, curve) in curves {
            w.u32(gpus);
            w.curve(curve);
        }
    }
    let gemm: Vec<Vec<u8>> = index.gemm.iter().map(|(_, curve)| pack_gemm(curve)).collect();
    w.len(gemm.len());
    for (&(dtype, n, k), bytes) in index.gemm.keys().zip(&gemm) {
        w.name(dtype.name());
        w.u32(n);
        w.u32(k);
        w.len(bytes.len());
    }
    let attention: Vec<Vec<u8>> = index.attention.iter().map(|(_, surface)| pack_surface(surface)).collect();
    w.len(attention.len());
    for (key, bytes) in index.attention.keys().zip(&attention) {
        w.name(phase_name(key.phase));
        w.name(key.dtype.name());
        w.u32(key.heads.num_heads);
        w.u32(key.heads.num_kv_heads);
        w.u32(key.heads.head_dim);
        w.u8(u8::from(key.uneven));
        w.len(bytes.len());
    }
    for bytes in gemm.iter().chain(&attention) {
        w.0.extend_from_slice(bytes);
    }
    w.0
}

/// The index and facts packed in `bytes` by [`write`]; the curves and surfaces are decoded
/// when first read. An error names what is malformed.
pub fn read(bytes: &'static [u8]) -> Result<(ProfileIndex, ProfileFacts), String> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(MAGIC.len())? != MAGIC {
        return Err("not a servesim profile index (its first line differs)".into());
    }
    let peak = Peak { flops_per_s: r.f64()?, memory_bytes_per_s: r.f64()? };
    let has_attention = r.u8()? != 0;
    let gemm_dtypes = (0..r.u32()?).map(|_| r.dtype()).collect::<Result<_, _>>()?;
    let mut sampling = BTreeMap::new();
    for _ in 0..r.u32()? {
        let name = r.name()?;
        let method = SamplingMethod::parse(name).ok_or_else(|| format!("unknown sampling method {name:?}"))?;
        let rows = (0..r.u32()?).map(|_| Ok((r.u32()?, r.f64()?))).collect::<Result<_, String>>()?;
        sampling.insert(method, rows);
    }
    let mut collectives = [BTreeMap::new(), BTreeMap::new()];
    for curves in &mut collectives {
        for _ in 0..r.u32()? {
            let gpus = r.u32()?;
            curves.insert(gpus, r.curve()?);
        }
    }
    let gemm_keys = (0..r.u32()?)
        .map(|_| Ok(((r.dtype()?, r.u32()?, r.u32()?), r.u32()? as usize)))
        .collect::<Result<Vec<_>, String>>()?;
    let attention_keys = (0..r.u32()?)
        .map(|_| {
            let name = r.name()?;
            let phase = parse_phase(name).ok_or_else(|| format!("unknown attention phase {name:?}"))?;
            let dtype = r.dtype()?;
            let heads = HeadConfig { num_heads: r.u32()?, num_kv_heads: r.u32()?, head_dim: r.u32()? };
            let uneven = r.u8()? != 0;
            Ok((AttentionKey { phase, dtype, heads, uneven }, r.u32()? as usize))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let gemm = gemm_keys.into_iter().map(|(key, len)| Ok((key, r.take(len)?))).collect::<Result<Vec<_>, String>>()?;
    let attention =
        attention_keys.into_iter().map(|(key, len)| Ok((key, r.take(len)?))).collect::<Result<Vec<_>, String>>()?;
    if r.at != bytes.len() {
        return Err(format!("{} bytes after the last surface", bytes.len() - r.at));
    }
    let [allreduce, alltoall] = collectives;
    let index = ProfileIndex {
        peak,
        gemm: LazyMap::packed(gemm, unpack_gemm),
        attention: LazyMap::packed(attention, unpack_surface),
        allreduce,
        alltoall,
        sampling,
    };
    Ok((index, ProfileFacts { gemm_dtypes, has_attention }))
}

fn pack_gemm(curve: &GemmCurve) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    w.u8(u8::from(curve.single_row.is_some()) | u8::from(curve.rows.is_some()) << 1);
    if let Some(u) = curve.single_row {
        w.f64(u);
    }
    if let Some(rows) = &curve.rows {
        w.curve(rows);
    }
    w.0
}

fn pack_surface(surface: &Surface) -> Vec<u8> {
    let mut w = Writer(Vec::new());
    for axis in surface.axes.iter().chain([&surface.values]) {
        w.f64s(axis);
    }
    w.0
}

// A slice that [`read`] accepted was written by [`write`] and checked against its CSV by the
// bundled profiles' test: failing to decode it is a broken build, not bad input.
fn unpack_gemm(bytes: &[u8]) -> GemmCurve {
    let mut r = Reader { bytes, at: 0 };
    let decoded = (|| -> Result<GemmCurve, String> {
        let flags = r.u8()?;
        let single_row = if flags & 1 != 0 { Some(r.f64()?) } else { None };
        let rows = if flags & 2 != 0 { Some(r.curve()?) } else { None };
        Ok(GemmCurve { single_row, rows })
    })();
    decoded.expect("a bundled GEMM curve decodes")
}

fn unpack_surface(bytes: &[u8]) -> Surface {
    let mut r = Reader { bytes, at: 0 };
    let decoded = (|| -> Result<Surface, String> { Ok(Surface { axes: [r.f64s()?, r.f64s()?, r.f64s()?], values: r.f64s()? }) })();
    decoded.expect("a bundled attention surface decodes")
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).expect("a profile index's counts fit 32 bits"));
    }
    fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64s(&mut self, vs: &[f64]) {
        self.len(vs.len());
        vs.iter().for_each(|&v| self.f64(v));
    }
    fn curve(&mut self, curve: &Curve) {
        self.f64s(&curve.xs);
        self.f64s(&curve.ys);
    }
    fn name(&mut self, name: &str) {
        self.u8(u8::try_from(name.len()).expect("names are short"));
        self.0.extend_from_slice(name.as_bytes());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let end = end.ok_or_else(|| format!("ends at byte {} inside a field of {n} bytes", self.bytes.len()))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn f64s(&mut self) -> Result<Vec<f64>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n.checked_mul(8).ok_or("a list too long")?)?.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes"))).collect())
    }
    fn curve(&mut self) -> Result<Curve, String> {
        let (xs, ys) = (self.f64s()?, self.f64s()?);
        if xs.len() != ys.len() {
            return Err(format!("a curve of {} x and {} y", xs.len(), ys.len()));
        }
        Ok(Curve { xs, ys })
    }
    fn name(&mut self) -> Result<&'a str, String> {
        let n = self.u8()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| "a name that is not UTF-8".to_string())
    }
    fn dtype(&mut self) -> Result<Dtype, String> {
        let name = self.name()?;
        Dtype::parse(name).ok_or_else(|| format!("unknown dtype {name:?}"))
    }
}
