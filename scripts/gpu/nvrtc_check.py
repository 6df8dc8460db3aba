#!/usr/bin/env python3
"""Compiles kernels with NVRTC exactly as servesim does (src/engine/cuda/compile.rs): the source is
kernels/common.cuh, a newline, `#line 1 "<file>"`, then the file; options
`--gpu-architecture=<arch> --std=c++17`. No GPU needed.

    pip install nvidia-cuda-nvrtc-cu12
    python3 scripts/gpu/nvrtc_check.py                       # the new kernels, compute_80 + 90
    python3 scripts/gpu/nvrtc_check.py --ptx-dir /tmp/ptx a.cu b.cu   # other files; keep the PTX
    pip install nvidia-cuda-nvcc-cu12   # ships ptxas (no nvcc); then, registers and spills:
    python3 scripts/gpu/nvrtc_check.py --ptxas        # ptxas -v on each PTX for sm_80 / sm_90

Exits non-zero if any compile fails; prints NVRTC's log either way.
"""
import argparse
import ctypes
import glob
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_FILES = ["attention_prefill_tc.cu", "attention_decode_split.cu"]
ARCHES = ["compute_80", "compute_90"]


def load_nvrtc():
    candidates = []
    try:
        import nvidia.cuda_nvrtc  # noqa: F401  (pip install nvidia-cuda-nvrtc-cu12)
        for p in nvidia.cuda_nvrtc.__path__:
            candidates += sorted(glob.glob(os.path.join(p, "lib", "libnvrtc.so*")))
    except ImportError:
        pass
    candidates += ["libnvrtc.so", "libnvrtc.so.12", "libnvrtc.so.13"]
    errors = []
    for c in candidates:
        if "alt" in os.path.basename(c) or "builtins" in os.path.basename(c):
            continue
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            errors.append(f"{c}: {e}")
    sys.exit("cannot load libnvrtc (pip install nvidia-cuda-nvrtc-cu12):\n" + "\n".join(errors))


def compile_one(nv, name, source, arch):
    prog = ctypes.c_void_p()
    rc = nv.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if rc != 0:
        return False, f"nvrtcCreateProgram failed ({rc})", b""
    opts = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = nv.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nv.nvrtcGetProgramLog(prog, log)
    ptx = b""
    if rc == 0:
        nv.nvrtcGetPTXSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        nv.nvrtcGetPTX(prog, buf)
        ptx = buf.value
    nv.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc == 0, log.value.decode(errors="replace").strip(), ptx


def find_ptxas():
    try:
        import nvidia.cuda_nvcc  # noqa: F401  (pip install nvidia-cuda-nvcc-cu12)
        for p in nvidia.cuda_nvcc.__path__:
            c = os.path.join(p, "bin", "ptxas")
            if os.path.exists(c):
                return c
    except ImportError:
        pass
    return shutil.which("ptxas")


def ptxas_report(ptxas, ptx, arch):
    """Registers / spills / shared memory per entry, from `ptxas -v` (PTX compute_XY -> sm_XY)."""
    sm = arch.replace("compute_", "sm_")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        open(path, "wb").write(ptx)
        r = subprocess.run([ptxas, f"-arch={sm}", "-v", path, "-o", os.path.join(d, "k.cubin")],
                           capture_output=True, text=True)
    if r.returncode != 0:
        return False, r.stderr.strip()
    lines, entry, spill = [], None, ""
    for l in r.stderr.splitlines():
        l = l.replace("ptxas info    : ", "").strip()
        if l.startswith("Compiling entry function"):
            entry = l.split("'")[1]
        elif "spill stores" in l:
            spill = l
        elif l.startswith("Used") and entry:
            lines.append(f"{entry} ({sm}): {l}; {spill}")
            entry = None
    return True, "\n".join(sorted(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", default=DEFAULT_FILES, help="files under kernels/")
    ap.add_argument("--arch", action="append", help="default: compute_80 and compute_90")
    ap.add_argument("--ptx-dir", help="write <file>.<arch>.ptx here")
    ap.add_argument("--ptxas", action="store_true",
                    help="also assemble with ptxas -v and print registers / spills per entry")
    args = ap.parse_args()
    nv, path = load_nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    nv.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    print(f"NVRTC {major.value}.{minor.value} ({path})")
    prelude = open(os.path.join(ROOT, "kernels", "common.cuh")).read()
    failed = 0
    for f in args.files:
        body = open(os.path.join(ROOT, "kernels", os.path.basename(f))).read()
        source = f'{prelude}\n#line 1 "{os.path.basename(f)}"\n{body}'
        for arch in args.arch or ARCHES:
            ok, log, ptx = compile_one(nv, os.path.basename(f), source, arch)
            entries = [l.split()[-1].rstrip("(") for l in ptx.decode().splitlines() if l.startswith(".visible .entry")]
            print(f"{'ok  ' if ok else 'FAIL'} {f} {arch}: {len(ptx)} bytes of PTX, entries {entries}")
            if log:
                print("  " + log.replace("\n", "\n  "))
            if ok and args.ptx_dir:
                os.makedirs(args.ptx_dir, exist_ok=True)
                open(os.path.join(args.ptx_dir, f"{os.path.basename(f)}.{arch}.ptx"), "wb").write(ptx)
            failed += not ok
            if ok and args.ptxas:
                ptxas = find_ptxas()
                if not ptxas:
                    print("  ptxas not found (pip install nvidia-cuda-nvcc-cu12)")
                else:
                    pok, rep = ptxas_report(ptxas, ptx, arch)
                    print("  " + rep.replace("\n", "\n  "))
                    failed += not pok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
