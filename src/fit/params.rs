//! The fit's view of the cost parameters: the registry lives with [`CostParams`] in
//! [`crate::scenario::cost_params`]; here names given on the command line are looked up.

pub use crate::scenario::cost_params::*;

use crate::Error;

/// The parameter called `name`, or an error that lists the known names.
pub fn lookup(name: &str) -> Result<&'static ParamSpec, Error> {
    find(name).ok_or_else(|| Error::Usage {
        flag: "--params",
        value: name.to_string(),
        reason: format!("unknown cost parameter; known parameters: {}", known_names()),
    })
}

/// Looks up every name, rejecting unknown names and duplicates (a duplicate would give the
/// optimiser two coordinates for one value).
pub fn lookup_all(names: &[String]) -> Result<Vec<&'static ParamSpec>, Error> {
    let mut out: Vec<&'static ParamSpec> = Vec::with_capacity(names.len());
    for name in names {
        let spec = lookup(name)?;
        if out.iter().any(|p| p.name == spec.name) {
            return Err(Error::Usage {
                flag: "--params",
                value: name.clone(),
                reason: "named twice".into(),
            });
        }
        out.push(spec);
    }
    Ok(out)
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_list_the_known_ones() {
        let err = lookup("gemm_eff").unwrap_err().to_string();
        assert!(err.contains("gemm_eff"), "{err}");
        assert!(err.contains("seq_overhead_us") && err.contains("gemm_efficiency"), "{err}");
        let dup = lookup_all(&["seq_overhead_us".into(), "seq_overhead_us".into()]).unwrap_err();
        assert!(dup.to_string().contains("twice"), "{dup}");
    }
}
