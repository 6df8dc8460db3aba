#!/usr/bin/env python3
"""Lists the long options of `vllm serve` in a vLLM 0.8-0.9 release, read from its wheel's source.

    pip download vllm==0.9.2 --no-deps -d /tmp/w
    python3 scripts/vllm_flags.py /tmp/w/vllm-0.9.2-*.whl

Building the release's parser needs torch and the release's whole dependency set; this reads the
three files that build it instead (vllm/entrypoints/cli/serve.py, vllm/entrypoints/openai/cli_args.py,
vllm/engine/arg_utils.py) with Python's own parser. In those releases every option is a string
literal in an `add_argument` call. A boolean option also gets `--no-<name>` when argparse's
BooleanOptionalAction backs it: given in the call, or, where the call spreads a config's keyword
arguments (`**model_kwargs["name"]` with `model_kwargs = get_kwargs(ModelConfig)`), when that
config field's annotation in vllm/config.py names `bool` (arg_utils `_compute_kwargs`). Checked
against the 0.8.5 table, which was listed by building the parser: the same flags.

Prints the flags, one per line, sorted; `--help` included (argparse adds it).
"""
import ast
import sys
import zipfile

FILES = ("vllm/entrypoints/cli/serve.py", "vllm/entrypoints/openai/cli_args.py", "vllm/engine/arg_utils.py")


def bool_fields(config_source):
    """{class name: {field names whose annotation names bool}} of the dataclasses in vllm/config.py."""
    out = {}
    for node in ast.walk(ast.parse(config_source)):
        if isinstance(node, ast.ClassDef):
            fields = set()
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names = {n.id for n in ast.walk(item.annotation) if isinstance(n, ast.Name)}
                    if "bool" in names:
                        fields.add(item.target.id)
            out[node.name] = fields
    return out


def kwargs_sources(tree):
    """{variable: config class} for every `x = get_kwargs(Config)` in the module."""
    out = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "get_kwargs" and node.value.args
                and isinstance(node.value.args[0], ast.Name)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.args[0].id
    return out


def is_boolean_optional(call, sources, bools):
    for kw in call.keywords:
        if kw.arg == "action" and isinstance(kw.value, ast.Attribute) and kw.value.attr == "BooleanOptionalAction":
            return True
        if kw.arg is None and isinstance(kw.value, ast.Subscript):
            var = getattr(kw.value.value, "id", None)
            key = kw.value.slice
            if var in sources and isinstance(key, ast.Constant):
                return key.value in bools.get(sources[var], set())
    return False


def flags(sources_by_path, config_source):
    bools = bool_fields(config_source)
    found = {"--help"}
    for path in FILES:
        tree = ast.parse(sources_by_path[path])
        sources = kwargs_sources(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                longs = [n for n in names if n.startswith("--")]
                found.update(longs)
                if longs and is_boolean_optional(node, sources, bools):
                    found.update("--no-" + n[2:] for n in longs)
    return sorted(found)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with zipfile.ZipFile(sys.argv[1]) as wheel:
        read = lambda p: wheel.read(p).decode()
        print("\n".join(flags({p: read(p) for p in FILES}, read("vllm/config.py"))))


if __name__ == "__main__":
    main()
