//! A Kubernetes manifest for a deployment: per kind of instance a Deployment (its replicas, GPU
//! requests, the pinned image, the engine's flags, probes on `/health`) and a Service.

use serde_json::{Value, json};

use super::{Deployment, Instance};

/// GPU resource name by vendor, as the device plugins register them.
fn gpu_resource(gpu: &str) -> &'static str {
    if gpu.to_ascii_uppercase().starts_with("MI") { "amd.com/gpu" } else { "nvidia.com/gpu" }
}

/// A DNS-1123 label from `text`: lower case, `-` for anything else, at most 63 characters.
pub fn dns_label(text: &str) -> String {
    let mut label: String = text.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    while label.contains("--") {
        label = label.replace("--", "-");
    }
    let label = label.trim_matches('-');
    let label = &label[..label.len().min(63)];
    let label = label.trim_end_matches('-');
    if label.is_empty() { "servesim".into() } else { label.to_string() }
}

fn container(d: &Deployment, instance: &Instance, gpu: &str) -> Value {
    let tgi = instance.program[0] == "text-generation-launcher";
    // A Python module's program (SGLang's `python3 -m sglang.launch_server`) is the command.
    let module = instance.program.len() > 3 && instance.program[1] == "-m";
    // The vLLM image's entry point changed between releases; its API server module did not.
    let (command, mut args): (Option<Vec<String>>, Vec<String>) = if tgi {
        (None, instance.program[1..].to_vec())
    } else if module {
        (Some(instance.program[..3].to_vec()), instance.program[3..].to_vec())
    } else {
        (Some(vec!["python3".into(), "-m".into(), "vllm.entrypoints.openai.api_server".into()]), vec!["--model".into(), d.model.clone()])
    };
    args.extend(instance.args.words());
    let mut env: Vec<Value> = instance.args.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect();
    env.push(json!({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": true}}}));
    let probe = |period: u32, failures: u32| {
        json!({"httpGet": {"path": "/health", "port": instance.port}, "periodSeconds": period, "failureThreshold": failures})
    };
    let mut c = json!({
        "name": "engine",
        "image": d.image,
        "args": args,
        "env": env,
        "ports": [{"containerPort": instance.port, "name": "http"}],
        "resources": {"limits": {gpu_resource(gpu): instance.gpus_each}},
        // Loading weights and capturing graphs takes minutes: up to 30 before the liveness probe.
        "startupProbe": probe(10, 180),
        "readinessProbe": probe(5, 3),
        "livenessProbe": probe(10, 3),
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    });
    if let Some(command) = command {
        c["command"] = json!(command);
    }
    c
}

/// The manifest, as YAML documents: a Deployment and a Service per kind of instance. `name`
/// becomes the objects' names (made a DNS label); `gpu` picks the GPU resource.
pub fn manifest(d: &Deployment, name: &str, gpu: &str) -> String {
    let base = dns_label(name);
    let mut docs = Vec::new();
    for instance in &d.instances {
        let object = if instance.role == "serve" { base.clone() } else { dns_label(&format!("{base}-{}", instance.role)) };
        let labels = json!({"app.kubernetes.io/name": object, "app.kubernetes.io/managed-by": "servesim"});
        docs.push(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": object, "labels": labels},
            "spec": {
                "replicas": instance.count,
                "selector": {"matchLabels": {"app.kubernetes.io/name": object}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [container(d, instance, gpu)],
                        // Tensor parallelism shares memory between processes through /dev/shm.
                        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
                    },
                },
            },
        }));
        docs.push(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": object, "labels": labels},
            "spec": {
                "selector": {"app.kubernetes.io/name": object},
                "ports": [{"name": "http", "port": instance.port, "targetPort": instance.port}],
            },
        }));
    }
    let mut out = format!("# {name}: {}, written by servesim plan\n", d.engine);
    for note in &d.notes {
        out += &format!("# note: {note}\n");
    }
    for doc in docs {
        out += "---\n";
        out += &serde_norway::to_string(&doc).expect("plain JSON values serialize as YAML");
    }
    out
}
