//! The commands that start, on a real engine, the deployment a plan simulated: every simulated
//! engine setting as a flag of the release the engine profile models, that release pinned, and a
//! Kubernetes manifest.
//!
//! ```text
//!  Scenario (one candidate, resolved) ──► vllm / tgi / sglang::args ──► Args (flags, env, notes)
//!        engine profile ──► flags::table ──► check: every flag is one the pinned release has
//!                                      └──► image, pip pin, P/D connector and proxy
//!  Deployment ──► script() (top-N.sh)   ──► kubernetes::manifest() (top-N.k8s.yaml)
//! ```

pub mod flags;
pub mod kubernetes;
mod sglang;
mod tgi;
mod vllm;

use std::fmt::Write as _;

use crate::scenario::engine_profile::EngineVersion;
use crate::scenario::{EngineConfig, ModelSpec, Policy, PoolRole, Scenario};

/// The port every instance listens on; a disaggregated deployment's proxy takes it, and its
/// prefill and decode instances the two after it.
pub const PORT: u16 = 8000;

/// One instance's command line, built setting by setting.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Args {
    /// `(flag, value)`; `None` for a switch.
    pub flags: Vec<(String, Option<String>)>,
    pub env: Vec<(String, String)>,
    /// What the command cannot say: settings a release lacks, placeholders to fill in.
    pub notes: Vec<String>,
}

impl Args {
    fn flag(&mut self, flag: &str, value: impl std::fmt::Display) {
        self.flags.push((flag.to_string(), Some(value.to_string())));
    }

    fn switch(&mut self, flag: &str) {
        self.flags.push((flag.to_string(), None));
    }

    fn env(&mut self, name: &str, value: &str) {
        self.env.push((name.to_string(), value.to_string()));
    }

    fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The flags and their values as argv words.
    pub fn words(&self) -> Vec<String> {
        let mut words = Vec::new();
        for (flag, value) in &self.flags {
            words.push(flag.clone());
            words.extend(value.clone());
        }
        words
    }
}

/// What one kind of instance runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// `serve`, `prefill` or `decode`.
    pub role: &'static str,
    /// Instances of this kind in the whole deployment.
    pub count: u32,
    pub gpus_each: u32,
    pub port: u16,
    /// The program (`vllm serve MODEL`, `text-generation-launcher --model-id MODEL`).
    pub program: Vec<String>,
    pub args: Args,
}

/// A plan's answer as something to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Deployment {
    /// `vLLM 0.6.3`, `TGI 2.3.1`.
    pub engine: String,
    /// The release pinned, as `pip install` takes it (empty for TGI) and as an image.
    pub pip: String,
    pub image: String,
    /// The model as the engine loads it: a Hugging Face repository id or a local folder.
    pub model: String,
    pub instances: Vec<Instance>,
    /// A disaggregated deployment's proxy: its program and arguments.
    pub proxy: Option<Vec<String>>,
    /// Everything the commands cannot say, one line each.
    pub notes: Vec<String>,
    /// The flags of each instance that the pinned release does not have (empty when every
    /// simulated setting deploys).
    pub unknown_flags: Vec<String>,
}

/// Why a scenario has no deploy command.
#[derive(Clone, Debug, PartialEq)]
pub struct NotDeployable(pub String);

/// The engine's name as its project writes it.
fn engine_name(policy: Policy) -> &'static str {
    match policy {
        Policy::Tgi => "TGI",
        Policy::Sglang => "SGLang",
        _ => "vLLM",
    }
}

/// The release a scenario's engine runs: `[engine] version`, or its profile's default.
fn pinned_release(engine: &EngineConfig) -> Option<EngineVersion> {
    engine.version.or_else(|| engine.profile.as_ref().map(|p| p.default_version))
}

/// The deployment of `units` copies of `scenario`'s replica (or, disaggregated, of its xPyD unit:
/// each pool's replicas are the unit's). `model`
/// is what the engine loads; `None` takes the preset's Hugging Face repository.
pub fn deployment(scenario: &Scenario, units: u32, model: Option<String>) -> Result<Deployment, NotDeployable> {
    let engine = &scenario.engine;
    let Some(profile) = &engine.profile else {
        return Err(NotDeployable(format!(
            "policy {:?} is servesim's own engine: `servesim serve` runs it on a small model, not a production deployment",
            engine.policy.name()
        )));
    };
    let release = pinned_release(engine).expect("a profile has a default release");
    let table = flags::table(&profile.name).ok_or_else(|| NotDeployable(format!("no flag table for engine profile {}", profile.name)))?;
    let mut notes = Vec::new();
    let model = model.unwrap_or_else(|| match ModelSpec::preset_hf_repo(&scenario.model.name) {
        Some(repo) => repo.to_string(),
        None => {
            notes.push(format!(
                "model {:?} is not a preset: MODEL stands for its Hugging Face repository id or local folder",
                scenario.model.name
            ));
            "MODEL".to_string()
        }
    });
    let name = engine_name(engine.policy);
    if scenario.hardware.gpu.name.to_ascii_uppercase().starts_with("MI") && engine.policy != Policy::Tgi {
        notes.push(format!(
            "{} is an AMD GPU: the pinned wheel and image are {name}'s CUDA builds; run the ROCm build of {name} {release} (AMD's images, or {name} built from source for ROCm)",
            scenario.hardware.gpu.name
        ));
    }
    if release.to_string() != table.release {
        notes.push(format!(
            "flags checked against {name} {}'s table (the release the {} profile's table was read for); the plan pins {release}",
            table.release,
            profile.name
        ));
    }
    let draft = engine.speculative.as_ref().and_then(|s| s.draft.as_ref()).and_then(|d| ModelSpec::preset_hf_repo(&d.name));
    let program = |model: &str| -> Vec<String> {
        match engine.policy {
            Policy::Tgi => vec!["text-generation-launcher".into(), "--model-id".into(), model.into()],
            Policy::Sglang => ["python3", "-m", "sglang.launch_server", "--model-path", model].map(String::from).to_vec(),
            _ => vec!["vllm".into(), "serve".into(), model.into()],
        }
    };
    let instance_args = |pool_engine: &EngineConfig, dp_size: u32| match engine.policy {
        Policy::Tgi => tgi::args(&scenario.model, pool_engine),
        Policy::Sglang => sglang::args(&scenario.model, pool_engine, dp_size),
        _ => vllm::args(&scenario.model, pool_engine, release, draft),
    };
    let mut instances = Vec::new();
    let mut proxy = None;
    if scenario.pools.iter().any(|p| p.role != PoolRole::Serve) {
        let Some(pd) = table.pd_proxy.clone() else {
            return Err(NotDeployable(format!("servesim writes no disaggregated deployment of {name} {}", table.release)));
        };
        for (k, pool) in scenario.pools.iter().enumerate() {
            let prefill = pool.role == PoolRole::Prefill;
            let mut args = instance_args(&pool.engine, 1);
            args.flag("--kv-transfer-config", if prefill { &pd.prefill_kv_transfer_config } else { &pd.decode_kv_transfer_config });
            for assignment in &pd.env {
                if let Some((name, value)) = assignment.split_once('=') {
                    args.env.retain(|(n, _)| n != name);
                    args.env(name, value);
                }
            }
            let port = PORT + 1 + k as u16;
            args.flag("--port", port);
            instances.push(Instance {
                role: pool.role.name(),
                // The scenario is one xPyD unit; the deployment is `units` of them.
                count: pool.engine.replicas.saturating_mul(units.max(1)),
                gpus_each: pool.engine.tensor_parallel,
                port,
                program: program(&model),
                args,
            });
        }
        if pd.env.iter().any(|e| e == "VLLM_USE_V1=0") && engine.policy == Policy::VllmV1 {
            notes.push(format!(
                "vLLM {}'s disaggregated prefill ({}) runs on the V0 engine; the simulation modelled V1's scheduler",
                table.release, pd.connector
            ));
        }
        let port_of = |role: &str| instances.iter().find(|i| i.role == role).map_or(PORT, |i| i.port);
        let mut p = vec!["python3".to_string(), pd.script.clone()];
        for flag in &pd.args {
            let value = match flag.as_str() {
                "--model" => model.clone(),
                "--host" => "0.0.0.0".to_string(),
                "--port" => PORT.to_string(),
                f if f.contains("prefill") && f.ends_with("-hosts") => "PREFILL_HOSTS".to_string(),
                f if f.contains("prefill") && f.ends_with("-ports") => port_of("prefill").to_string(),
                f if f.contains("prefill") => format!("PREFILL_HOST:{}", port_of("prefill")),
                f if f.contains("decode") && f.ends_with("-hosts") => "DECODE_HOSTS".to_string(),
                f if f.contains("decode") && f.ends_with("-ports") => port_of("decode").to_string(),
                f if f.contains("decode") => format!("DECODE_HOST:{}", port_of("decode")),
                other => return Err(NotDeployable(format!("the P/D proxy's flag {other} has no value servesim knows"))),
            };
            p.push(flag.clone());
            p.push(value);
        }
        notes.push(format!(
            "the proxy is {} from the vLLM repository at v{} (not in the pip package or the image; {}); PREFILL_HOSTS and DECODE_HOSTS stand for every prefill and decode instance's address",
            pd.script, table.release, pd.source
        ));
        proxy = Some(p);
    } else {
        // SGLang runs a node's replicas as data-parallel workers of one server (`--dp-size`).
        let (servers, dp_size) = if engine.policy == Policy::Sglang { sglang::servers(units, engine.tensor_parallel) } else { (units.max(1), 1) };
        let mut args = instance_args(engine, dp_size);
        args.flag("--port", PORT);
        instances.push(Instance {
            role: "serve",
            count: servers,
            // Every data-parallel rank (vLLM's) or worker (SGLang's) of a server runs beside the others.
            gpus_each: engine.tensor_parallel.saturating_mul(engine.data_parallel.map_or(1, |dp| dp.ranks)).saturating_mul(dp_size),
            port: PORT,
            program: program(&model),
            args,
        });
        if servers > 1 {
            notes.push(format!(
                "{servers} {} behind one load balancer; the simulation routed by {}",
                if dp_size > 1 { "servers" } else { "replicas" },
                engine.router.name()
            ));
        }
    }
    let mut unknown_flags = Vec::new();
    for instance in &instances {
        for (flag, _) in &instance.args.flags {
            if !table.flags.contains(flag) && !unknown_flags.contains(flag) {
                unknown_flags.push(flag.clone());
            }
        }
        for note in &instance.args.notes {
            if !notes.contains(note) {
                notes.push(note.clone());
            }
        }
    }
    for flag in &unknown_flags {
        notes.push(format!(
            "{name} {} has no {flag}: the simulated setting it carries cannot be deployed on that release",
            table.release
        ));
    }
    Ok(Deployment {
        engine: format!("{name} {}", table.release),
        pip: table.pip.clone(),
        image: table.image.clone(),
        model,
        instances,
        proxy,
        notes,
        unknown_flags,
    })
}

/// A word as a POSIX shell reads it back: single-quoted unless it is plain.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c));
    if plain { word.to_string() } else { format!("'{}'", word.replace('\'', r"'\''")) }
}

fn command_line(instance: &Instance) -> String {
    let mut words: Vec<String> = instance.args.env.iter().map(|(k, v)| format!("{k}={}", shell_word(v))).collect();
    words.extend(instance.program.iter().map(|w| shell_word(w)));
    words.extend(instance.args.words().iter().map(|w| shell_word(w)));
    words.join(" ")
}

impl Deployment {
    /// `top-N.sh`: the pin, the notes, and one command per kind of instance.
    pub fn script(&self, label: &str) -> String {
        let mut out = format!("#!/bin/sh\n# {label}\n");
        writeln!(out, "# {}: {}image {}", self.engine, if self.pip.is_empty() { String::new() } else { format!("pip install {}, or ", shell_word(&self.pip)) }, self.image)
            .unwrap();
        for note in &self.notes {
            writeln!(out, "# note: {note}").unwrap();
        }
        for instance in &self.instances {
            let on = if instance.role == "serve" {
                format!("on each of {} replica(s), {} GPU(s) each", instance.count, instance.gpus_each)
            } else {
                format!("{} instance(s), {} GPU(s) each", instance.count, instance.gpus_each)
            };
            writeln!(out, "\n# {}: {on}\n{}", instance.role, command_line(instance)).unwrap();
        }
        if let Some(proxy) = &self.proxy {
            writeln!(out, "\n# proxy: one, in front\n{}", proxy.iter().map(|w| shell_word(w)).collect::<Vec<_>>().join(" ")).unwrap();
        }
        out
    }
}

#[cfg(test)]
mod tests;
